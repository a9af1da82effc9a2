"""What every session store promises (wren.store.records.SessionStore), on SQLite and on Redis; and what only
a shared store adds: one turn per key across instances, timers claimed once."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from wren.store.records import HistoryRow, SessionStore, StoreUnreachable, TimerRow
from wren.store.redis_sessions import RedisSessionStore


def exchange(n: int) -> list[HistoryRow]:
    return [HistoryRow("user", f"question {n}"), HistoryRow("assistant", f"answer {n}")]


async def test_a_committed_turn_comes_back_with_its_engine_state(store: SessionStore) -> None:
    ids = await store.commit_turn("xiaozhi:a", "builtin", exchange(1), {"name": "Emma"})
    assert len(ids) == 2 and ids[0] < ids[1]
    history, state = await store.load("xiaozhi:a", "builtin")
    assert [(r.role, r.content) for r in history] == [("user", "question 1"), ("assistant", "answer 1")]
    assert state == {"name": "Emma"}
    assert (await store.load("xiaozhi:a", "openai"))[1] == {}  # engine states are kept apart
    assert await store.load("xiaozhi:b", "builtin") == ([], {})  # and sessions too


async def test_history_is_trimmed_to_its_newest_rows_and_never_starts_mid_exchange(
    store: SessionStore,
) -> None:
    for n in range(5):
        await store.commit_turn("k", "builtin", exchange(n), None)
    await store.commit_turn("k", "builtin", [HistoryRow("assistant", "a timer went off")], None)
    history, _ = await store.load("k", "builtin")
    assert await store.message_count("k") == 6  # history_max_messages
    assert history[0].role == "user"
    assert [r.content for r in history][-3:] == ["question 4", "answer 4", "a timer went off"]


async def test_an_interrupted_reply_is_amended_to_what_was_spoken(store: SessionStore) -> None:
    _, reply_id = await store.commit_turn("k", "builtin", exchange(1), None)
    await store.amend_reply("other-key", reply_id, "not here")  # another session's row is never touched
    await store.amend_reply("k", reply_id, "ans")
    history, _ = await store.load("k", "builtin")
    assert (history[-1].content, history[-1].meta) == ("ans", {"interrupted": True})


async def test_engine_state_outlives_the_trimmed_transcript(store: SessionStore) -> None:
    await store.commit_turn("k", "builtin", exchange(0), {"name": "Emma"})
    for n in range(1, 6):
        await store.commit_turn("k", "builtin", exchange(n), None)  # None keeps the state
    assert (await store.load("k", "builtin"))[1] == {"name": "Emma"}


async def test_timers_are_kept_until_delivered_or_deleted(store: SessionStore) -> None:
    now = time.time()
    late = await store.add_timer(TimerRow(0, "k", "alarm", "wake up", now + 60, now))
    soon = await store.add_timer(TimerRow(0, "k", "timer", "", now + 5, now))
    gone = await store.add_timer(TimerRow(0, "j", "reminder", "call mum", now + 30, now))
    assert [t.id for t in await store.undelivered_timers()] == [soon, gone, late]  # soonest first
    assert (await store.undelivered_timers())[2] == TimerRow(late, "k", "alarm", "wake up", now + 60, now)
    version = await store.timers_version()
    assert await store.claim_timer(soon, 60)
    await store.mark_timer_delivered(soon)
    await store.delete_timer(gone)
    assert [t.id for t in await store.undelivered_timers()] == [late]
    assert not await store.claim_timer(soon, 60)  # spoken: nobody may speak it again
    if store.shared:
        assert await store.timers_version() > version


async def test_without_a_shared_store_the_lease_is_only_the_agents_lock(tmp_path) -> None:
    from wren.store.sqlite_sessions import SqliteSessionStore

    store = SqliteSessionStore(tmp_path / "s.sqlite3")
    assert store.shared is False
    async with store.turn_lease("k"), store.turn_lease("k"):  # one process: its own lock serialises
        pass


# ---- only a shared store: two instances on one Redis ------------------------------------------------


@pytest.fixture
async def two_instances(clean_redis: str):
    a, b = RedisSessionStore(clean_redis, lease_s=1.0), RedisSessionStore(clean_redis, lease_s=1.0)
    await a.open()
    await b.open()
    yield a, b
    await a.close()
    await b.close()


async def test_a_turn_on_one_instance_waits_for_the_same_keys_turn_on_another(two_instances) -> None:
    a, b = two_instances
    order: list[str] = []

    async def turn(store: RedisSessionStore, name: str, hold: float) -> None:
        async with store.turn_lease("xiaozhi:dev"):
            order.append(f"{name} in")
            await asyncio.sleep(hold)
            order.append(f"{name} out")

    first = asyncio.create_task(turn(a, "a", 1.6))  # longer than the lease: it is renewed meanwhile
    await asyncio.sleep(0.05)
    await asyncio.gather(turn(b, "b", 0), first)
    assert order == ["a in", "a out", "b in", "b out"]
    async with b.turn_lease("xiaozhi:other"), a.turn_lease("xiaozhi:another"):
        pass  # other keys are never held up


async def test_a_crashed_instances_lease_runs_out(two_instances, clean_redis: str) -> None:
    _, b = two_instances
    client = redis.Redis.from_url(clean_redis)
    client.set("wren:turn:xiaozhi:dev", "dead-instance", px=500)  # held by an instance that is gone
    started = time.monotonic()
    async with b.turn_lease("xiaozhi:dev"):
        waited = time.monotonic() - started
    client.close()
    assert 0.3 < waited < 2.0


async def test_only_one_instance_claims_a_timer(two_instances) -> None:
    a, b = two_instances
    now = time.time()
    timer = await a.add_timer(TimerRow(0, "k", "timer", "", now, now))
    claims = await asyncio.gather(*(s.claim_timer(timer, 60) for s in (a, b, a, b)))
    assert claims.count(True) == 1
    winner, loser = (a, b) if claims[0] or claims[2] else (b, a)
    await loser.release_timer(timer)  # not its claim: changes nothing
    assert not await loser.claim_timer(timer, 60)
    await winner.release_timer(timer)  # the device was gone: someone else may speak it now
    assert await loser.claim_timer(timer, 60)
    await loser.mark_timer_delivered(timer)
    assert await a.undelivered_timers() == [] and not await winner.claim_timer(timer, 60)


async def test_a_store_that_cannot_be_reached_fails_at_open_with_its_reason() -> None:
    store = RedisSessionStore("redis://127.0.0.1:1/0")
    with pytest.raises(StoreUnreachable, match=r"127\.0\.0\.1:1.* cannot be reached"):
        await store.open()
