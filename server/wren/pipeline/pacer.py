"""Downlink pacing on a virtual playback clock (reference §9.3).

The device has a 40-frame jitter queue and drops anything beyond it, so a reply is sent at playback
speed: `next_play` is the monotonic time at which the next frame will start playing on the device.
A frame may go out `prebuffer` frames before its play time, so the first `prebuffer + 1` frames leave at
once and then one per frame duration, never more than `max_ahead` of the device's playback. When
the sender falls behind (the queue ran dry: waiting on TTS or a tool), the clock is re-anchored to now
so the late audio is not sent in a burst. Deadlines advance by exactly one frame, so there is no
drift from sleep overshoot.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

MAX_AHEAD_MS = 1000  # hard ceiling on how far ahead of playback we ever send


class PlaybackPacer:
    def __init__(
        self,
        frame_ms: int,
        prebuffer_frames: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.frame_s = frame_ms / 1000
        # The frame being sent counts too: prebuffer + 1 frames ahead must stay under the ceiling.
        max_prebuffer = max(0, MAX_AHEAD_MS // frame_ms - 1)
        self.lead_s = min(max(0, prebuffer_frames), max_prebuffer) * self.frame_s
        self._clock = clock
        self._sleep = sleep
        self._next_play: float | None = None
        self.frames_sent = 0
        self.reanchors = 0

    async def wait_for_slot(self) -> None:
        """Sleep until the next frame may be sent; call `frame_sent()` right after sending it."""
        now = self._clock()
        if self._next_play is None or self._next_play < now:
            if self._next_play is not None:
                self.reanchors += 1  # the device has played everything: start a fresh pre-buffer
            self._next_play = now
        send_at = self._next_play - self.lead_s
        if send_at > now:
            await self._sleep(send_at - now)

    def frame_sent(self) -> None:
        assert self._next_play is not None, "wait_for_slot() first"
        self._next_play += self.frame_s
        self.frames_sent += 1

    def playback_end(self) -> float:
        """Monotonic time at which the device finishes playing every frame sent so far."""
        return self._next_play if self._next_play is not None else self._clock()

    async def wait_drained(self, margin_ms: int) -> None:
        """Sleep until the last frame has played plus `margin_ms` (then `tts stop` cuts nothing off)."""
        if self.frames_sent == 0:
            return
        remaining = self.playback_end() + margin_ms / 1000 - self._clock()
        if remaining > 0:
            await self._sleep(remaining)
