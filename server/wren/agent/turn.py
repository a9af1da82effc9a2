"""One conversation turn: runs the engine under the session lock and the global gate, streams its
events to the consumer, and records the outcome in history.

The engine runs in its own task and pushes events into a queue, so `interrupt()` can come from any
task (a voice session's barge-in handler) and cancels only the engine. Recording waits for the
consumer's verdict: reaching the end of the iteration records the whole reply; `interrupt(spoken)`
records only what was actually spoken, marked `interrupted`. The session lock is held until the
record is committed, so the next turn on the same key always sees this one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from wren.agent.engines.base import TurnContext
from wren.agent.events import TextChunk, TurnEvent
from wren.agent.messages import InboundMessage
from wren.agent.store import HistoryRow
from wren.tools.router import ToolRouter

if TYPE_CHECKING:
    from wren.agent.loop import AgentLoop

log = logging.getLogger(__name__)

_END = object()
APOLOGY = "Sorry, something went wrong on my side. Please try again."
MAX_INJECTIONS_PER_DRAIN = 3  # follow-ups merged into one user message at a safe boundary
MAX_INJECTION_CYCLES = 5  # extra answer cycles per turn; the rest are re-published as new turns


class Turn:
    def __init__(
        self,
        agent: AgentLoop,
        msg: InboundMessage,
        tools: ToolRouter,
        accept_pending: bool = False,
    ) -> None:
        self.agent = agent
        self.message = msg
        self.session_key = msg.session_key
        self.tools = tools
        self.replies: list[str] = []  # each finished answer (several if follow-ups were injected)
        self._accept_pending = accept_pending
        self._pending: asyncio.Queue[InboundMessage] | None = None
        self._events: asyncio.Queue[Any] = asyncio.Queue()
        self._verdict = asyncio.Event()  # consumer reached the end, or interrupt/aclose
        self._interrupted = False
        self._spoken = ""
        self._engine_task: asyncio.Task[str] | None = None
        self._stopped = False  # consumer side: no more events after an interrupt
        self._consumed: list[str] = []
        self._last_reply_row: int | None = None  # id of the recorded final answer (for late amends)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"turn:{self.session_key}")
        agent.track(self._task)

    # consumer side -----------------------------------------------------------------------------
    def __aiter__(self) -> AsyncIterator[TurnEvent]:
        return self

    async def __anext__(self) -> TurnEvent:
        if self._stopped:
            raise StopAsyncIteration
        item = await self._events.get()
        if item is _END or self._stopped:
            self._stopped = True
            self._verdict.set()
            await self._wait_recorded()
            raise StopAsyncIteration
        if isinstance(item, TextChunk):
            self._consumed.append(item.text)
        return item

    async def interrupt(self, spoken_text: str = "") -> None:
        """Barge-in: cancel the reply and record only `spoken_text` (marked interrupted).

        Also valid after the iteration ended (the text was generated but the speaker was cut off while
        playing it): the recorded answer is then amended to what was spoken.
        """
        if self._verdict.is_set() and not self._interrupted:
            await self._wait_recorded()
            if self._last_reply_row is not None:
                self._interrupted = True
                await self.agent.store.amend_reply(self._last_reply_row, spoken_text)
                if self.replies:
                    self.replies[-1] = spoken_text
            return
        if not self._verdict.is_set():
            self._interrupted = True
            self._spoken = spoken_text
            self._stopped = True
            if self._engine_task is not None and not self._engine_task.done():
                self._engine_task.cancel()
            self._verdict.set()
            self._events.put_nowait(_END)  # wake a consumer blocked in __anext__
        await self._wait_recorded()

    async def aclose(self) -> None:
        """Abandon the turn: records what the consumer received so far, as interrupted."""
        if not self._verdict.is_set():
            await self.interrupt("".join(self._consumed))
        else:
            await self._wait_recorded()

    async def __aenter__(self) -> Turn:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def text(self) -> str:
        """Consume the whole turn and return the reply text (all answers joined)."""
        async for _ in self:
            pass
        return "\n".join(r for r in self.replies if r)

    async def _wait_recorded(self) -> None:
        try:
            await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if self._task.cancelled():
                return
            raise
        except Exception:
            log.exception("turn %s failed", self.session_key)

    # producer side -----------------------------------------------------------------------------
    def _take_pending(self, injected: list[str]) -> list[InboundMessage]:
        """Safe-boundary hook for engines: up to 3 queued follow-ups, recorded as user rows."""
        if self._pending is None:
            return []
        taken: list[InboundMessage] = []
        while len(taken) < MAX_INJECTIONS_PER_DRAIN:
            try:
                taken.append(self._pending.get_nowait())
            except asyncio.QueueEmpty:
                break
        injected.extend(m.content for m in taken)
        return taken

    async def _run(self) -> None:
        agent = self.agent
        key = self.session_key
        leftovers: list[InboundMessage] = []
        async with agent.session_lock(key):
            if self._accept_pending:
                self._pending = agent.register_pending(key)
            try:
                await self._converse(agent)
            finally:
                if self._pending is not None:
                    leftovers = agent.unregister_pending(key, self._pending)
                self._events.put_nowait(_END)
        for msg in leftovers:  # never dropped: each becomes a fresh turn
            await agent.bus.publish_inbound(msg)

    async def _converse(self, agent: AgentLoop) -> None:
        history, state = await agent.store.load(self.session_key, agent.engine.name)
        history_dicts = [{"role": r.role, "content": r.content} for r in history]
        segments: list[tuple[list[str], str, dict[str, Any]]] = []
        user_rows = [self.message.content]
        text = self.message.content
        cycles = 0
        while not self._interrupted:
            ctx = TurnContext(
                session_key=self.session_key,
                message=self.message,
                text=text,
                history=list(history_dicts),
                state=state,
                tools=self.tools,
                now=agent.now,
                take_pending=lambda rows=user_rows: self._take_pending(rows),
            )
            reply = await self._generate(ctx)
            if reply is None:  # interrupted while generating
                break
            segments.append((user_rows, reply, {}))
            self.replies.append(reply)
            if self._pending is None or cycles >= MAX_INJECTION_CYCLES:
                break
            follow_ups = self._take_pending([])
            if not follow_ups:
                break
            # Safe boundary after a final answer: answer the follow-ups in the same turn.
            cycles += 1
            history_dicts += [{"role": "user", "content": u} for u in user_rows]
            history_dicts.append({"role": "assistant", "content": reply})
            user_rows = [m.content for m in follow_ups]
            text = "\n\n".join(user_rows)
        self._events.put_nowait(_END)
        await self._verdict.wait()
        if self._interrupted:
            if segments and segments[-1][0] is user_rows:
                segments.pop()  # the last answer was cut while being spoken
                self.replies.pop()
            segments.append((user_rows, self._spoken, {"interrupted": True}))
        rows: list[HistoryRow] = []
        for users, reply, meta in segments:
            rows += [HistoryRow("user", u) for u in users]
            if reply or not meta.get("interrupted"):
                rows.append(HistoryRow("assistant", reply, meta))
        ids = await agent.store.commit_turn(self.session_key, agent.engine.name, rows, state)
        if rows and rows[-1].role == "assistant" and not self._interrupted:
            self._last_reply_row = ids[-1]

    async def _generate(self, ctx: TurnContext) -> str | None:
        async with self.agent.gate:
            if self._interrupted:
                return None
            self._engine_task = asyncio.get_running_loop().create_task(self._pump(ctx))
            try:
                return await self._engine_task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if self._interrupted and current is not None and not current.cancelling():
                    return None
                raise

    async def _pump(self, ctx: TurnContext) -> str:
        parts: list[str] = []
        try:
            async for event in self.agent.engine.respond(ctx):
                if isinstance(event, TextChunk):
                    if not event.text:
                        continue
                    parts.append(event.text)
                self._events.put_nowait(event)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("engine %s failed in session %s", self.agent.engine.name, self.session_key)
            parts.append(APOLOGY)
            self._events.put_nowait(TextChunk(APOLOGY))
        return "".join(parts)
