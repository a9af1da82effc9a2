"""A session's inbox: every frame from the socket, strictly in arrival order, bounded.

The transport's reader task puts every frame in; one processor task takes them out. The bound
(`INBOX_FRAMES`) has one overflow policy: the reader waits, which back-pressures the socket (TCP) instead of
dropping audio. So a `listen stop` is handled only after every audio frame received before it: an utterance
is never cut short under load.

Consecutive audio frames waiting in the inbox come out as one `AudioRun` (up to the next text frame, at most
`MAX_AUDIO_RUN`), so the uplink pays its executor hand-off once per run, not per frame, and order is kept.
Frames an uplink round fed (wren.session.uplink_rounds) never come through here; what the round leaves for
the session (turn events, frames behind them) comes as one `RoundResult`, in order with the rest.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

INBOX_FRAMES = 256  # ~15 s of 60 ms audio; beyond that the reader waits (TCP back-pressure)
MAX_AUDIO_RUN = 32  # frames per executor call (≈2 s of audio): one session cannot hold a listen thread long


@dataclass(frozen=True, slots=True)
class TextIn:
    text: str


@dataclass(frozen=True, slots=True)
class AudioRun:
    frames: list[bytes]


@dataclass(frozen=True, slots=True)
class RoundResult:
    """What an uplink round (wren.session.uplink_rounds) leaves for the processor: the turn events of audio
    it fed, and the frames behind them it did not feed, in arrival order."""

    events: list[Any]
    rest: list[tuple[bytes, float | None]]


@dataclass(frozen=True, slots=True)
class ReplyEnded:
    """Posted by the session itself when a reply ends, so it is acted on in order with the frames."""


class Inbox:
    def __init__(self, capacity: int = INBOX_FRAMES, max_run: int = MAX_AUDIO_RUN) -> None:
        self._queue: asyncio.Queue[str | bytes | ReplyEnded | RoundResult] = asyncio.Queue(capacity)
        self._max_run = max_run
        self._held: TextIn | ReplyEnded | RoundResult | None = None  # what ended the last audio run

    async def put(self, frame: str | bytes) -> None:
        await self._queue.put(frame)

    async def post(self, event: ReplyEnded) -> None:
        await self._queue.put(event)

    def post_round(self, result: RoundResult) -> bool:
        """An uplink round's result, without waiting: the session used the round only while this inbox was
        empty and runs it before queueing anything else, so there is room; False (dropped) if not."""
        try:
            self._queue.put_nowait(result)
        except asyncio.QueueFull:
            return False
        return True

    @property
    def idle(self) -> bool:
        """Nothing waiting to be processed."""
        return self._held is None and self._queue.empty()

    async def next(self) -> TextIn | AudioRun | ReplyEnded | RoundResult:
        if self._held is not None:
            held, self._held = self._held, None
            return held
        first = await self._queue.get()
        if isinstance(first, str):
            return TextIn(first)
        if isinstance(first, ReplyEnded | RoundResult):
            return first
        run = [first]
        while len(run) < self._max_run and not self._queue.empty():
            item = self._queue.get_nowait()
            if not isinstance(item, bytes):
                self._held = TextIn(item) if isinstance(item, str) else item
                break
            run.append(item)
        return AudioRun(run)

    def drain(self) -> None:
        """Empty it: a reader blocked on a full inbox must not wait for a processor that is gone."""
        while not self._queue.empty():
            self._queue.get_nowait()
