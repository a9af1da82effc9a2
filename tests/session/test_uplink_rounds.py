"""`UplinkRounds`: the frames every session read in one loop iteration go through the uplink in one call;
a session that is about to queue something else has its frames fed first; one session's failure is its own.

The uplink itself is replaced by a recorder here (its real work is tests/server/test_uplink_on_loop.py's
spoken turn); what is under test is who is fed when, and in which order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from wren.session import uplink_rounds
from wren.session.uplink_rounds import MAX_SESSIONS_PER_CALL, UplinkRounds


class _Listener:
    def __init__(self, open_: bool = True) -> None:
        self.open = open_

    def round_item(self, payloads: list[bytes]) -> tuple[Any, ...] | None:
        return (self, None, payloads) if self.open else None


class _Member:
    def __init__(self, name: str, open_: bool = True, fail_on_done: bool = False) -> None:
        self.name = name
        self.listener = _Listener(open_)
        self.fail_on_done = fail_on_done
        self.done: list[tuple[list, Any]] = []

    def round_done(self, fed: list, outcome: Any) -> None:
        self.done.append((list(fed), outcome))
        if self.fail_on_done:
            raise RuntimeError("this session's hand-off broke")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[Any, ...]]]:
    """Every `feed_listeners` call's items; each frame's outcome is one (empty) list of frames."""
    seen: list[list[tuple[Any, ...]]] = []

    def feed(items: list[tuple[Any, ...]]) -> list[Any]:
        seen.append(items)
        return [[[] for _ in payloads] for _listener, _uplink, payloads in items]

    monkeypatch.setattr(uplink_rounds, "feed_listeners", feed)
    return seen


async def test_frames_of_many_sessions_in_one_loop_iteration_are_fed_in_one_call(calls):
    rounds = UplinkRounds()
    members = [_Member(f"d{i}") for i in range(5)]
    for i, member in enumerate(members):
        rounds.add(member, b"frame-a", float(i))
        rounds.add(member, b"frame-b", float(i))
    assert calls == []  # nothing runs inside the readers: the round is the next callback
    await asyncio.sleep(0)
    assert len(calls) == 1
    assert [payloads for _, _, payloads in calls[0]] == [[b"frame-a", b"frame-b"]] * 5
    assert all(m.done == [([(b"frame-a", float(i)), (b"frame-b", float(i))], [[], []])]
               for i, m in enumerate(members))
    assert (rounds.rounds, rounds.frames) == (1, 10)


async def test_a_round_of_more_sessions_than_one_call_takes_is_fed_in_several_calls_in_order(calls):
    rounds = UplinkRounds()
    members = [_Member(f"d{i}") for i in range(MAX_SESSIONS_PER_CALL + 3)]
    for member in members:
        rounds.add(member, b"x", None)
    await asyncio.sleep(0)
    assert [len(items) for items in calls] == [MAX_SESSIONS_PER_CALL, 3]
    assert [item[0] for items in calls for item in items] == [m.listener for m in members]


async def test_a_session_about_to_queue_something_else_has_its_pending_frames_fed_first(calls):
    rounds = UplinkRounds()
    talker, other = _Member("talker"), _Member("other")
    rounds.add(other, b"o", None)
    rounds.add(talker, b"t", None)
    rounds.run_if_holding(talker)  # e.g. a `listen stop` read right behind the frame
    assert talker.done and other.done and len(calls) == 1  # the whole round, now
    rounds.run_if_holding(talker)  # nothing of it left: nothing runs
    await asyncio.sleep(0)  # the round's own callback finds it done
    assert len(calls) == 1 and rounds.rounds == 1
    rounds.add(talker, b"t2", None)  # the next frame starts a new round
    await asyncio.sleep(0)
    assert len(calls) == 2 and talker.done[-1][0] == [(b"t2", None)]


async def test_a_session_whose_utterance_closed_gets_its_frames_back_unfed(calls):
    rounds = UplinkRounds()
    closed, open_ = _Member("closed", open_=False), _Member("open")
    rounds.add(closed, b"c", 1.0)
    rounds.add(open_, b"o", 2.0)
    await asyncio.sleep(0)
    assert closed.done == [([(b"c", 1.0)], None)]
    assert [payloads for _, _, payloads in calls[0]] == [[b"o"]]


async def test_one_sessions_failure_leaves_the_other_sessions_fed(calls, caplog):
    rounds = UplinkRounds()
    broken, fine = _Member("broken", fail_on_done=True), _Member("fine")
    rounds.add(broken, b"b", None)
    rounds.add(fine, b"f", None)
    await asyncio.sleep(0)
    assert fine.done == [([(b"f", None)], [[]])]
    assert "could not be handed to its session" in caplog.text


async def test_a_closed_sessions_failing_hand_back_leaves_the_other_sessions_fed(calls, caplog):
    rounds = UplinkRounds()
    broken, fine = _Member("broken", open_=False, fail_on_done=True), _Member("fine")
    rounds.add(broken, b"b", None)
    rounds.add(fine, b"f", None)
    await asyncio.sleep(0)
    assert broken.done == [([(b"b", None)], None)]
    assert fine.done == [([(b"f", None)], [[]])]
    assert "could not be handed to its session" in caplog.text


async def test_a_failing_call_is_every_session_of_its_outcome(monkeypatch):
    def feed(items: list[tuple[Any, ...]]) -> list[Any]:
        raise RuntimeError("the VAD model failed")

    monkeypatch.setattr(uplink_rounds, "feed_listeners", feed)
    rounds = UplinkRounds()
    a, b = _Member("a"), _Member("b")
    rounds.add(a, b"a", None)
    rounds.add(b, b"b", None)
    await asyncio.sleep(0)
    for member in (a, b):
        (_fed, outcome), = member.done
        assert isinstance(outcome, RuntimeError)
    assert rounds.frames == 0
