"""`SessionTurns` on its own: one holder per key, the global gate, follow-ups and their overflow policy."""

from __future__ import annotations

import asyncio

import pytest
from wren.agent.messages import InboundMessage
from wren.agent.sessions import PENDING_QUEUE_SIZE, SessionTurns


def chat(text: str, room: str = "room") -> InboundMessage:
    return InboundMessage("chat", "u", room, text)


class Republished:
    """The republish side: records each message, and whether its key was still held at that moment."""

    def __init__(self) -> None:
        self.sessions: SessionTurns | None = None
        self.messages: list[str] = []
        self.key_was_held: list[bool] = []

    async def __call__(self, msg: InboundMessage) -> None:
        assert self.sessions is not None
        self.messages.append(msg.content)
        self.key_was_held.append(self.sessions.busy(msg.session_key))


@pytest.fixture
def republished() -> Republished:
    return Republished()


@pytest.fixture
def sessions(republished: Republished) -> SessionTurns:
    owner = SessionTurns(max_concurrent_turns=8, republish=republished)
    republished.sessions = owner
    return owner


async def hold(sessions: SessionTurns, key: str, entered: asyncio.Event, release: asyncio.Event,
               accept_follow_ups: bool = False) -> None:
    async with sessions.occupy(key, accept_follow_ups=accept_follow_ups):
        entered.set()
        await release.wait()


async def test_one_holder_per_key_and_other_keys_run_meanwhile(sessions):
    first_in, second_in, other_in, release = (asyncio.Event() for _ in range(4))
    first = asyncio.create_task(hold(sessions, "chat:a", first_in, release))
    await asyncio.wait_for(first_in.wait(), 5)
    second = asyncio.create_task(hold(sessions, "chat:a", second_in, release))
    other = asyncio.create_task(hold(sessions, "chat:b", other_in, asyncio.Event()))
    await asyncio.wait_for(other_in.wait(), 5)
    await asyncio.sleep(0.05)
    assert sessions.busy("chat:a") and not second_in.is_set()
    release.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert second_in.is_set() and not sessions.busy("chat:a")
    other.cancel()
    await asyncio.gather(other, return_exceptions=True)


async def test_the_gate_bounds_engine_work_across_keys(republished):
    sessions = SessionTurns(max_concurrent_turns=1, republish=republished)
    in_engine: list[str] = []
    release = asyncio.Event()

    async def work(key: str) -> None:
        async with sessions.occupy(key) as held, held.engine_slot():
            in_engine.append(key)
            await release.wait()

    tasks = [asyncio.create_task(work(key)) for key in ("chat:a", "chat:b")]
    await asyncio.sleep(0.05)
    assert len(in_engine) == 1 and sessions.busy("chat:a") and sessions.busy("chat:b")
    release.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert sorted(in_engine) == ["chat:a", "chat:b"]


async def test_only_an_active_bus_turn_takes_follow_ups(sessions):
    assert not sessions.offer(chat("nobody is talking"))
    entered, release = asyncio.Event(), asyncio.Event()
    voice = asyncio.create_task(hold(sessions, "chat:room", entered, release))
    await asyncio.wait_for(entered.wait(), 5)
    assert not sessions.offer(chat("a voice turn takes no follow-ups"))
    release.set()
    await voice

    async with sessions.occupy("chat:room", accept_follow_ups=True) as held:
        assert held.accepts_follow_ups
        assert sessions.offer(chat("one")) and sessions.offer(chat("two")) and sessions.offer(chat("three"))
        assert sessions.queued("chat:room") == 3
        assert not sessions.offer(chat("another room", room="elsewhere"))
        assert [m.content for m in held.take_follow_ups(2)] == ["one", "two"]
        assert [m.content for m in held.take_follow_ups(2)] == ["three"]
        assert held.take_follow_ups(2) == []
    assert sessions.queued("chat:room") == 0


async def test_a_full_queue_refuses_so_the_message_becomes_its_own_turn(sessions):
    async with sessions.occupy("chat:room", accept_follow_ups=True):
        accepted = [sessions.offer(chat(f"m{i}")) for i in range(PENDING_QUEUE_SIZE + 1)]
    assert accepted == [True] * PENDING_QUEUE_SIZE + [False]


async def test_leftovers_are_republished_in_order_once_the_key_is_free(sessions, republished):
    async with sessions.occupy("chat:room", accept_follow_ups=True) as held:
        for text in ("first", "second", "third"):
            sessions.offer(chat(text))
        held.take_follow_ups(1)
    assert republished.messages == ["second", "third"]
    assert republished.key_was_held == [False, False]


async def test_leftovers_are_republished_when_the_turn_fails(sessions, republished):
    with pytest.raises(RuntimeError):
        async with sessions.occupy("chat:room", accept_follow_ups=True):
            sessions.offer(chat("not lost"))
            raise RuntimeError("the store broke")
    assert republished.messages == ["not lost"]
    assert not sessions.busy("chat:room") and not sessions.offer(chat("no turn now"))
