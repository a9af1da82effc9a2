"""A log line when the uplink falls behind real time: the box is past its capacity (issue 11).

`wren_uplink_lag_seconds` tells a scraper; a maker running `wren serve` on a small box reads the log, and
before this the log said nothing while every device's words came later and later. Every uplink frame's
lag is observed here (from `ServerMetrics`, on the event loop: a comparison and a few additions a frame).
Per window of `WINDOW_S`, when more than `LATE_SHARE` of its frames finished over `LATE_MS` behind their
real-time slot, one warning says how many, how late the worst was and how many devices were connected,
at most once per `REPEAT_S`; the first window without that after a warning says so once, at INFO.

250 ms is about where a person starts to notice an answer coming late; 1 % of frames is far above what a
box within its capacity shows (`make bench`: 100 streaming devices on 2 cores, lag p99 5-41 ms) and far
below a backlog that keeps growing (docs/performance.md, round 9: the p99 going from 157 ms to 7.4 s).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

LATE_MS = 250.0
LATE_SHARE = 0.01
WINDOW_S = 10.0
REPEAT_S = 60.0
CAPACITY_HINT = ("the box is past its capacity: fewer devices per box, or several instances "
                 "(README, 'Capacity'; docs/deploy.md, 'Several instances')")


class OverloadWatch:
    def __init__(self, devices: Callable[[], int], clock: Callable[[], float] = time.monotonic) -> None:
        self._devices = devices  # devices connected now, for the warning
        self._clock = clock
        self._window_end: float | None = None
        self._frames = 0
        self._late = 0
        self._worst_ms = 0.0
        self._warned_at: float | None = None  # the last warning
        self._said_behind = False  # a warning was logged and no "back" line since
        self.warnings = 0

    def observe(self, lag_ms: float) -> None:
        now = self._clock()
        if self._window_end is None:
            self._window_end = now + WINDOW_S
        elif now >= self._window_end:
            self._close_window(now)
        self._frames += 1
        if lag_ms > LATE_MS:
            self._late += 1
            if lag_ms > self._worst_ms:
                self._worst_ms = lag_ms

    def _close_window(self, now: float) -> None:
        frames, late, worst_ms = self._frames, self._late, self._worst_ms
        self._window_end, self._frames, self._late, self._worst_ms = now + WINDOW_S, 0, 0, 0.0
        behind = late > LATE_SHARE * frames
        if behind and (self._warned_at is None or now - self._warned_at >= REPEAT_S):
            self._warned_at, self._said_behind = now, True
            self.warnings += 1
            log.warning("uplink audio falling behind real time: %.1f %% of the last %.0f s's %d frames "
                        "finished over %.0f ms late (the worst %.2f s), %d devices connected; %s",
                        100 * late / frames, WINDOW_S, frames, LATE_MS, worst_ms / 1000, self._devices(),
                        CAPACITY_HINT)
        elif not behind and self._said_behind:
            self._said_behind = False
            log.info("uplink audio back within %.0f ms of real time (%d frames in the last %.0f s)", LATE_MS,
                     frames, WINDOW_S)
