"""A task cancelled while one of the shared store's Redis commands runs is cancelled: redis-py 8.1.0's own
asyncio client often returns the command's result instead and the task goes on (wren.store.redis_client).
A timer scheduler that went on this way never stopped, and the server's shutdown waited for ever."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from wren.store.redis_sessions import connect

TRIES = 150


@pytest.fixture
async def client(clean_redis: str) -> AsyncIterator[Any]:
    opened = connect(clean_redis)
    yield opened
    await opened.aclose()


async def times_a_cancelled_task_went_on(client: Any, command: Callable[[Any], Awaitable[Any]]) -> int:
    """Cancel a task looping on `command` at a random moment, TRIES times; how often it went on."""
    pace = random.Random(11)
    went_on = 0
    for _ in range(TRIES):
        running = asyncio.Event()

        async def loop(running: asyncio.Event = running) -> bool:
            while True:
                await command(client)
                if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                    return True  # the cancel was swallowed: the task would go on
                running.set()

        task = asyncio.create_task(loop())
        await running.wait()
        await asyncio.sleep(pace.random() * 0.002)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            went_on += await task
    return went_on


async def test_a_task_cancelled_during_a_command_stops(client: Any) -> None:
    assert await times_a_cancelled_task_went_on(client, lambda r: r.get("wren:test")) == 0


async def test_a_task_cancelled_during_a_transaction_stops(client: Any) -> None:
    async def transaction(r: Any) -> None:
        async with r.pipeline(transaction=True) as pipe:
            pipe.incr("wren:count")
            pipe.get("wren:count")
            await pipe.execute()

    assert await times_a_cancelled_task_went_on(client, transaction) == 0


async def test_after_cancelled_commands_the_client_still_answers_each_command_with_its_own_reply(
    client: Any,
) -> None:
    await client.set("wren:test", "kept")
    await times_a_cancelled_task_went_on(client, lambda r: r.incr("wren:count"))
    assert await client.get("wren:test") == "kept"
    assert await client.ping() is True
