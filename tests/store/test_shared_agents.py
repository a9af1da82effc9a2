"""Two agents (two instances) on one Redis store, in one process: the timers and the turns they share.
A timer set through one instance is spoken once, by the instance its device is connected to; a session's
turns never overlap across instances, and each sees the other's history."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from wren.agent.loop import AgentLoop

from tests.agent.conftest import make_config
from tests.agent.test_timers import Speaker, until

KEY = "xiaozhi:aa:bb:cc:dd:ee:01"


@pytest.fixture
async def instances(clean_redis: str, tmp_path: Path) -> AsyncIterator[Callable[[], AgentLoop]]:
    started: list[AgentLoop] = []

    async def start() -> AgentLoop:
        config = make_config(tmp_path / f"data-{len(started)}")  # nothing shared through files
        config.store.url = clean_redis
        loop = AgentLoop.from_config(config)
        await loop.start()
        started.append(loop)
        return loop

    yield start
    for loop in started:
        await loop.close()


async def say(agent: AgentLoop, text: str) -> str:
    return (await agent.process_direct(text, session_key=KEY)).content


async def test_a_name_taught_on_one_instance_is_known_on_the_other(instances) -> None:
    a, b = await instances(), await instances()
    assert "Emma" in await say(a, "call me Emma")
    assert "Emma" in await say(b, "what is my name")


async def test_a_timer_set_through_one_instance_is_spoken_once_by_the_instance_with_the_device(
    instances,
) -> None:
    a, b = await instances(), await instances()
    on_a, on_b = Speaker(), Speaker()
    a.timers.set_delivery(on_a, reachable=lambda key: False)  # the device has moved on to b
    b.timers.set_delivery(on_b, reachable=lambda key: key == KEY)
    assert (await say(a, "set a timer for 1 second")).startswith("Okay, a timer for 1 second")
    await until(lambda: bool(b.timers.pending(KEY)), timeout=3)  # b learns of it from the store
    await asyncio.wait_for(on_b.heard.wait(), timeout=5)
    await asyncio.sleep(1.5)  # a few sync rounds later: nobody speaks it again
    assert on_b.spoken == [(KEY, "Your 1 second timer is done.")]
    assert on_a.offered == 0
    assert not a.timers.pending(KEY) and not b.timers.pending(KEY)


async def test_a_timer_both_instances_could_speak_is_still_spoken_once(instances) -> None:
    a, b = await instances(), await instances()
    on_a, on_b = Speaker(), Speaker()
    a.timers.set_delivery(on_a)  # a device of the key on both (a reconnect racing the old socket's close)
    b.timers.set_delivery(on_b)
    await say(b, "set a timer for 1 second")
    await until(lambda: bool(on_a.spoken or on_b.spoken), timeout=5)
    await asyncio.sleep(1.5)
    assert len(on_a.spoken) + len(on_b.spoken) == 1


async def test_a_turn_waits_while_another_instance_runs_one_on_the_same_session(instances) -> None:
    a, b = await instances(), await instances()
    async with b.store.turn_lease(KEY):  # b is in the middle of a turn of this session
        turn = asyncio.create_task(say(a, "call me Ann"))
        await asyncio.sleep(0.5)
        assert not turn.done()
        assert "Ann" in await say_as(a, "xiaozhi:someone-else", "call me Ann")  # other sessions go on
    assert "Ann" in await asyncio.wait_for(turn, 5)


async def say_as(agent: AgentLoop, key: str, text: str) -> str:
    return (await agent.process_direct(text, session_key=key)).content


async def test_a_shared_store_that_stops_answering_is_logged_once_and_timers_go_on_when_it_is_back(
    instances, caplog: pytest.LogCaptureFixture,
) -> None:
    a = await instances()
    on_a = Speaker()
    a.timers.set_delivery(on_a)
    working = a.store.timers_version

    async def unreachable() -> int:
        raise ConnectionError("Redis is gone")

    a.store.timers_version = unreachable  # type: ignore[method-assign]
    with caplog.at_level("INFO", logger="wren.agent.timers"):
        await asyncio.sleep(1.6)  # three sync rounds or more
        a.store.timers_version = working  # type: ignore[method-assign]
        await say(a, "set a timer for 1 second")
        await asyncio.wait_for(on_a.heard.wait(), timeout=5)
    warnings = [r for r in caplog.records if "could not be read" in r.getMessage()]
    assert len(warnings) == 1
    assert any("can be read again" in r.getMessage() for r in caplog.records)


async def test_closing_stops_the_timers_even_when_a_store_call_swallows_the_cancel(instances) -> None:
    a = await instances()
    working = a.store.timers_version
    reading = asyncio.Event()

    async def swallowing() -> int:  # as redis-py's own client does (tests/store/test_redis_cancellation.py)
        reading.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.05)
        return await working()

    a.store.timers_version = swallowing  # type: ignore[method-assign]
    await asyncio.wait_for(reading.wait(), 2)  # the scheduler is reading the store's version
    await asyncio.wait_for(a.timers.close(), 3)
