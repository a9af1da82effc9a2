"""A virtual monotonic clock for pacing tests: `clock()` reads it, `await clock.sleep(s)` advances it."""

from __future__ import annotations


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
