"""A session's inbox: every frame from the socket, strictly in arrival order, bounded.

The transport's reader task puts every frame in; one processor task takes them out. The bound
(`INBOX_FRAMES`) has one overflow policy: the reader waits, which back-pressures the socket (TCP) instead of
dropping audio. So a `listen stop` is handled only after every audio frame received before it: an utterance
is never cut short under load.

Consecutive audio frames waiting in the inbox come out as one `AudioRun` (up to the next text frame, at most
`MAX_AUDIO_RUN`), so the uplink pays its executor hand-off once per run, not per frame, and order is kept.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

INBOX_FRAMES = 256  # ~15 s of 60 ms audio; beyond that the reader waits (TCP back-pressure)
MAX_AUDIO_RUN = 32  # frames per executor call (≈2 s of audio): one session cannot hold a listen thread long


@dataclass(frozen=True, slots=True)
class TextIn:
    text: str


@dataclass(frozen=True, slots=True)
class AudioRun:
    frames: list[bytes]


class Inbox:
    def __init__(self, capacity: int = INBOX_FRAMES, max_run: int = MAX_AUDIO_RUN) -> None:
        self._queue: asyncio.Queue[str | bytes] = asyncio.Queue(capacity)
        self._max_run = max_run
        self._held: str | None = None  # the text frame that ended the last audio run: next in line

    async def put(self, frame: str | bytes) -> None:
        await self._queue.put(frame)

    async def next(self) -> TextIn | AudioRun:
        if self._held is not None:
            text, self._held = self._held, None
            return TextIn(text)
        first = await self._queue.get()
        if isinstance(first, str):
            return TextIn(first)
        run = [first]
        while len(run) < self._max_run and not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, str):
                self._held = item
                break
            run.append(item)
        return AudioRun(run)

    def drain(self) -> None:
        """Empty it: a reader blocked on a full inbox must not wait for a processor that is gone."""
        while not self._queue.empty():
            self._queue.get_nowait()
