"""One conversation turn: runs the engine while holding its session key (and, per answer, a global engine
slot), streams its events to the consumer, and records the outcome in history.

The engine runs in its own task and pushes events into a bounded `EventStream` (back-pressure: the pump
waits while the consumer, the speaking pipeline, is behind), so `interrupt()` can come from any task (a
voice session's barge-in handler) and cancels only the engine, also while it waits for room. Recording
waits for the consumer's verdict: reaching the end of the iteration records the whole reply;
`interrupt(spoken)` records only what was actually spoken, marked `interrupted`. The key is held until
the record is committed, so the next turn on the same key always sees this one.

Every answer is bounded, whatever the engine (`[limits]`): its text is cut at `reply_chars` (at a sentence
end near the limit, else a word boundary; `ReplyBudget`) and it may take `deadline_s` from the engine's
start. Past either, the engine is closed (an OpenAI stream's HTTP response with it) and the answer ends
normally with what it said so far: the consumer speaks that and reaches the end (the device gets its
`tts stop`), history keeps it. The rest is never asked for.

A turn gets what it needs passed in (`TurnDeps`); who may run a turn for a key, the follow-up queue and
the gate belong to `wren.agent.sessions`, and the loop only decides which turns to start.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from wren.agent.engines.base import Engine, TurnContext
from wren.agent.event_stream import EventStream
from wren.agent.events import TextChunk, TurnEvent
from wren.agent.messages import InboundMessage
from wren.agent.sessions import Occupancy, SessionTurns
from wren.store.records import HistoryRow, SessionStore
from wren.tools.router import ToolRouter

log = logging.getLogger(__name__)

APOLOGY = "Sorry, something went wrong on my side. Please try again."
MAX_INJECTIONS_PER_DRAIN = 3  # follow-ups merged into one user message at a safe boundary
MAX_INJECTION_CYCLES = 5  # extra answer cycles per turn; the rest are re-published as new turns
SENTENCE_WINDOW = 300  # the stretch before reply_chars (at most half of it) where a cut seeks a sentence end

# Where a reply may be cut after a sentence: . ! ? … (closing quotes or brackets may follow) before a space
# or the end, a CJK full stop (no space follows those), a line break.
_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]}”’»*_]*(?=\s|$)|[。！？]+[」』”’）]*|\n")
MAX_WORD = 40  # a longer run without spaces is not one unfinished word (a URL, Thai text): never dropped


def _is_cjk(ch: str) -> bool:
    """CJK characters and punctuation: words of their own, a cut may fall between any two."""
    return "\u3000" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af" or "\uff00" <= ch <= "\uffef"


def _in_word(ch: str) -> bool:
    return not ch.isspace() and not _is_cjk(ch)


def _splits_word(text: str, at: int) -> bool:
    """A cut at `at` would split a word ("do|n't") or a number ("3.|5"): no space or CJK on either side."""
    return 0 < at < len(text) and _in_word(text[at - 1]) and _in_word(text[at])


def _word_end(text: str) -> int:
    """Where the last complete word of `text` ends: before a trailing run of word characters."""
    at = len(text)
    while at > 0 and _in_word(text[at - 1]) and len(text) - at < MAX_WORD:
        at -= 1
    return at if len(text) - at < MAX_WORD else len(text)


def cut_at_boundary(
    text: str, limit: int, *, sentence_from: int | None = None, words: bool = True, hard: bool = True
) -> str:
    """`text` cut to at most `limit` characters (0: no limit): after the last sentence end that is at or past
    `sentence_from` (default half the limit, so a cut never throws most of the text away for a full stop),
    else at the last word boundary (if `words`), else at the limit itself (if `hard`), else ''."""
    if limit <= 0 or len(text) <= limit:
        return text
    start = limit // 2 if sentence_from is None else sentence_from
    # endpos limit + 1: the lookahead after a full stop at the limit still sees the character after it.
    ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, limit + 1) if start <= m.end() <= limit]
    if ends:
        return text[: ends[-1]].rstrip()
    for at in range(limit, 0, -1) if words else ():
        if not _splits_word(text, at):
            return text[:at].rstrip()
    return text[:limit] if hard else ""


class ReplyBudget:
    """One answer's text on its way to the consumer, cut at `limit` characters (`[limits] reply_chars`).

    Text leaves as it comes (chunked as the engine wrote it), except in the last stretch before the limit:
    there everything since the last sentence end is held back (the sentence splitter waits for that end
    anyway), so the cut can land on it and never has to take back text the consumer was given.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.window = min(self.limit // 2, SENTENCE_WINDOW)
        self.sent = 0  # characters given to the consumer
        self.full = False  # the limit was reached: the answer is complete, the engine is asked for no more
        self._held = ""  # at most `limit - sent` characters (and one chunk)
        self._sentence_given = False  # what was given ends at a sentence end near the limit: cut there

    def take(self, text: str) -> str:
        """What of `text` (and the text held before it) the consumer may have now."""
        if self.full or not self.limit:
            return "" if self.full else text
        held = self._held + text
        room = self.limit - self.sent
        if len(held) > room:
            self.full = True
            self._held = ""
            # '' (nothing more) is the best cut when what was given ends a sentence near the limit; a hard
            # cut only when nothing was given at all.
            cut = cut_at_boundary(held, room, sentence_from=max(0, self.limit - self.window - self.sent),
                                  words=not self._sentence_given, hard=self.sent == 0)
            self.sent += len(cut)
            return cut
        if self.sent + len(held) < self.limit - self.window:
            release = len(held)
        else:
            ends = [m.end() for m in _SENTENCE_END.finditer(held) if m.end() < len(held)]
            release = ends[-1] if ends else 0
            self._sentence_given = self._sentence_given or release > 0
        self._held = held[release:]
        self.sent += release
        return held[:release]

    def rest(self, complete: bool) -> str:
        """The held text: all of it if the engine finished (`complete`), else up to its last whole word."""
        held, self._held = self._held, ""
        if not complete:
            held = held[: _word_end(held)]
        self.sent += len(held)
        return held


@dataclass(frozen=True)
class TurnDeps:
    """What a turn needs from the agent, handed in so that the turn knows nothing of the loop."""

    sessions: SessionTurns  # the key's lock, the global gate, the follow-up queue
    store: SessionStore  # history in, the turn's record out
    engine: Engine
    now: Callable[[], datetime]  # the agent's local clock, read whenever the engine asks
    track: Callable[[asyncio.Task[Any]], None]  # keeps the turn's task so the agent's close() can end it
    reply_chars: int = 0  # [limits] reply_chars: an answer's text is cut past this (0: no limit)
    deadline_s: float = 0.0  # [limits] turn_deadline_s: an engine still busy after this is ended (0: none)


class Turn:
    def __init__(
        self,
        deps: TurnDeps,
        msg: InboundMessage,
        tools: ToolRouter,
        accept_follow_ups: bool = False,
    ) -> None:
        self.deps = deps
        self.message = msg
        self.session_key = msg.session_key
        self.tools = tools
        self.replies: list[str] = []  # each finished answer (several if follow-ups were injected)
        self._accept_follow_ups = accept_follow_ups
        self._events: EventStream[TurnEvent] = EventStream()
        self._verdict = asyncio.Event()  # consumer reached the end, or interrupt/aclose
        self._interrupted = False
        self._spoken = ""
        self._engine_task: asyncio.Task[str] | None = None
        self._stopped = False  # consumer side: no more events after an interrupt
        self._consumed: list[str] = []
        self._last_reply_row: int | None = None  # id of the recorded final answer (for late amends)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"turn:{self.session_key}")
        deps.track(self._task)

    # consumer side -----------------------------------------------------------------------------
    def __aiter__(self) -> AsyncIterator[TurnEvent]:
        return self

    async def ready(self, timeout: float) -> bool:
        """Whether the next event is there (or the turn is over), waiting up to `timeout` s; takes nothing."""
        return self._stopped or await self._events.readable(timeout)

    async def __anext__(self) -> TurnEvent:
        if self._stopped:
            raise StopAsyncIteration
        item = await self._events.get()
        if item is None or self._stopped:
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
                await self.deps.store.amend_reply(self.session_key, self._last_reply_row, spoken_text)
                if self.replies:
                    self.replies[-1] = spoken_text
            return
        if not self._verdict.is_set():
            self._interrupted = True
            self._spoken = spoken_text
            self._stopped = True
            if self._engine_task is not None and not self._engine_task.done():
                self._engine_task.cancel()  # also ends a pump waiting for room in the event stream
            self._verdict.set()
            self._events.close()  # wake a consumer blocked in __anext__
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
    async def _run(self) -> None:
        sessions = self.deps.sessions
        async with sessions.occupy(self.session_key, accept_follow_ups=self._accept_follow_ups) as held:
            try:
                await self._converse(held)
            finally:
                self._events.close()

    def _take_follow_ups(self, held: Occupancy, injected: list[str]) -> list[InboundMessage]:
        """Safe-boundary hook for engines: up to 3 queued follow-ups, recorded as user rows."""
        taken = held.take_follow_ups(MAX_INJECTIONS_PER_DRAIN)
        injected.extend(m.content for m in taken)
        return taken

    async def _converse(self, held: Occupancy) -> None:
        deps = self.deps
        history, state = await deps.store.load(self.session_key, deps.engine.name)
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
                now=deps.now,
                take_pending=lambda rows=user_rows: self._take_follow_ups(held, rows),
            )
            reply = await self._generate(held, ctx)
            if reply is None:  # interrupted while generating
                break
            segments.append((user_rows, reply, {}))
            self.replies.append(reply)
            if not held.accepts_follow_ups or cycles >= MAX_INJECTION_CYCLES:
                break
            follow_ups = self._take_follow_ups(held, [])
            if not follow_ups:
                break
            # Safe boundary after a final answer: answer the follow-ups in the same turn.
            cycles += 1
            history_dicts += [{"role": "user", "content": u} for u in user_rows]
            history_dicts.append({"role": "assistant", "content": reply})
            user_rows = [m.content for m in follow_ups]
            text = "\n\n".join(user_rows)
        self._events.close()
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
        ids = await deps.store.commit_turn(self.session_key, deps.engine.name, rows, state)
        if rows and rows[-1].role == "assistant" and not self._interrupted:
            self._last_reply_row = ids[-1]

    async def _generate(self, held: Occupancy, ctx: TurnContext) -> str | None:
        async with held.engine_slot():  # the key is already held: lock before gate
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
        engine = self.deps.engine
        budget = ReplyBudget(self.deps.reply_chars)
        # From the engine's start (the gate's wait is not the engine's fault). Back-pressure counts, but an
        # answer that fits the downlink's buffers (64 + 64 chunks, 16 sentences) is produced long before.
        deadline = asyncio.timeout(self.deps.deadline_s if self.deps.deadline_s > 0 else None)
        complete = True
        events = engine.respond(ctx)
        try:
            try:
                async with deadline:
                    async for event in events:
                        if not isinstance(event, TextChunk):
                            await self._events.put(event)  # waits while the consumer is behind
                            continue
                        await self._text(parts, budget.take(event.text))
                        if budget.full:
                            log.info("engine %s: reply cut at %d characters in session %s "
                                     "(limits.reply_chars)", engine.name, budget.sent, self.session_key)
                            break
            finally:
                close = getattr(events, "aclose", None)
                if close is not None:
                    await close()  # now, not when collected: an OpenAI stream's response is closed with it
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            complete = False
            await self._text(parts, budget.rest(complete))
            if isinstance(exc, TimeoutError) and deadline.expired():
                log.info("engine %s still producing after %.1f s in session %s (limits.turn_deadline_s); "
                         "the answer ends with what it said", engine.name, self.deps.deadline_s,
                         self.session_key)
            else:
                log.exception("engine %s failed in session %s", engine.name, self.session_key)
                await self._text(parts, APOLOGY)
        if complete:
            await self._text(parts, budget.rest(complete))
        return "".join(parts)

    async def _text(self, parts: list[str], text: str) -> None:
        if text:
            parts.append(text)
            await self._events.put(TextChunk(text))  # waits while the consumer is behind (back-pressure)
