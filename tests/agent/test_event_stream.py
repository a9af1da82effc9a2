"""The bounded event stream between a turn's engine and its consumer: back-pressure, end, barge-in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from wren.agent.engines.base import TurnContext
from wren.agent.event_stream import EVENT_QUEUE_SIZE, EventStream
from wren.agent.events import TextChunk, TurnEvent
from wren.agent.loop import AgentLoop
from wren.agent.messages import InboundMessage
from wren.store.sqlite_sessions import SqliteSessionStore


async def test_put_waits_while_full_and_get_makes_room():
    stream: EventStream[int] = EventStream(2)
    assert await stream.put(1) and await stream.put(2)
    third = asyncio.create_task(stream.put(3))
    await asyncio.sleep(0.02)
    assert not third.done() and len(stream) == 2
    assert await stream.get() == 1
    assert await asyncio.wait_for(third, 1) is True
    assert [await stream.get(), await stream.get()] == [2, 3]


async def test_close_delivers_what_was_put_then_ends_and_never_waits():
    stream: EventStream[int] = EventStream(2)
    await stream.put(1)
    await stream.put(2)
    stream.close()  # full, yet closing neither waits nor fails
    stream.close()
    assert [await stream.get() for _ in range(4)] == [1, 2, None, None]
    assert await stream.put(3) is False


async def test_close_wakes_a_waiting_consumer_and_a_waiting_producer():
    empty: EventStream[int] = EventStream(1)
    getter = asyncio.create_task(empty.get())
    full: EventStream[int] = EventStream(1)
    await full.put(1)
    putter = asyncio.create_task(full.put(2))
    await asyncio.sleep(0.02)
    empty.close()
    full.close()
    assert await asyncio.wait_for(getter, 1) is None
    assert await asyncio.wait_for(putter, 1) is False


async def test_a_producer_waiting_for_room_can_be_cancelled():
    stream: EventStream[int] = EventStream(1)
    await stream.put(1)
    putter = asyncio.create_task(stream.put(2))
    await asyncio.sleep(0.02)
    putter.cancel()
    await asyncio.gather(putter, return_exceptions=True)
    assert putter.cancelled() and len(stream) == 1


class TalkativeEngine:
    """Yields `total` chunks without ever awaiting: only the event stream's bound can pause it."""

    name = "talkative"

    def __init__(self, total: int) -> None:
        self.total = total
        self.yielded = 0

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def respond(self, ctx: TurnContext) -> AsyncIterator[TurnEvent]:
        for i in range(self.total):
            self.yielded += 1
            yield TextChunk(f"w{i} ")


async def talkative_agent(tmp_path: Path, total: int) -> tuple[AgentLoop, TalkativeEngine]:
    engine = TalkativeEngine(total)
    agent = AgentLoop(engine, SqliteSessionStore(tmp_path / "sessions.sqlite3"))
    await agent.start()
    return agent, engine


def voice(text: str) -> InboundMessage:
    return InboundMessage("xiaozhi", "dev-1", "dev-1", text)


async def test_a_consumer_that_falls_behind_pauses_the_engine_and_barge_in_still_ends_the_turn(tmp_path):
    agent, engine = await talkative_agent(tmp_path, 10_000)
    try:
        turn = agent.begin_turn(voice("talk to me"))
        first = await asyncio.wait_for(anext(turn), 5)
        assert first == TextChunk("w0 ")
        await asyncio.sleep(0.1)  # the consumer stops reading; the engine must not run ahead unbounded
        assert engine.yielded <= EVENT_QUEUE_SIZE + 2
        await asyncio.wait_for(turn.interrupt("w0"), 5)  # the pump is blocked on a full stream
        assert not agent.sessions.busy("xiaozhi:dev-1")
        history, _ = await agent.store.load("xiaozhi:dev-1", "talkative")
        assert [(r.role, r.content, r.meta) for r in history] == [
            ("user", "talk to me", {}),
            ("assistant", "w0", {"interrupted": True}),
        ]
        engine.total = 3
        assert await asyncio.wait_for(agent.process_direct("again", session_key="xiaozhi:dev-1"), 5)
    finally:
        await agent.close()


async def test_back_pressure_loses_nothing_when_the_consumer_keeps_reading(tmp_path):
    total = EVENT_QUEUE_SIZE * 5
    agent, _ = await talkative_agent(tmp_path, total)
    try:
        received: list[str] = []
        async for event in agent.begin_turn(voice("talk to me")):
            assert isinstance(event, TextChunk)
            received.append(event.text)
            if len(received) % 7 == 0:
                await asyncio.sleep(0)  # a consumer with its own awaits (the speaking pipeline)
        assert received == [f"w{i} " for i in range(total)]
        history, _ = await agent.store.load("xiaozhi:dev-1", "talkative")
        assert history[-1].content == "".join(received)
    finally:
        await agent.close()
