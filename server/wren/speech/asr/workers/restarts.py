"""When to restart an ASR worker process that died or failed to load: exponential backoff, per worker.

Why backoff and not a fixed pause: a worker that fails for a reason that persists (a model file gone, memory
exhausted, a crash on start) would otherwise be respawned in a tight loop, each spawn costing ≈1 s of CPU
and a log line on a box that is already in trouble. Why retry at all: the reason may pass (memory freed, a
file restored), and the server should heal without a restart of its own.

The pause before restart n of a run of failures is `first_s × 2^(n-1)`, at most `max_s`. A worker that then
stays up `healthy_s` resets the run: its next failure waits `first_s` again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    first_s: float = 0.5
    max_s: float = 30.0
    healthy_s: float = 60.0  # up this long, a worker's next failure starts from first_s again


class RestartHistory:
    """One worker slot's failures: the pause before its next restart, and how many restarts it took to
    get it up again (for the health log line). Used under the supervisor's lock."""

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self.failures = 0  # in a row, since the worker last stayed up `healthy_s`
        self.restarts = 0  # restarts since the worker was last up (reported when it is up again)
        self.up_since: float | None = None

    def failed(self, now: float | None = None) -> float:
        """The worker died or failed to load: the pause before restarting it."""
        now = time.monotonic() if now is None else now
        if self.up_since is not None and now - self.up_since >= self.backoff.healthy_s:
            self.failures = 0
        self.up_since = None
        delay = min(self.backoff.max_s, self.backoff.first_s * 2**self.failures)
        self.failures += 1
        self.restarts += 1
        return delay

    def up(self, now: float | None = None) -> int:
        """The worker loaded; returns how many restarts that took (0: it was never down)."""
        self.up_since = time.monotonic() if now is None else now
        restarts, self.restarts = self.restarts, 0
        return restarts
