"""A thread-safe pool of warm recognisers. Creating one costs ≈0.25 s, and a pocketsphinx decoder holds its
own copy of the language model and dictionary (≈70 MB RSS each, measured), so streams borrow and return them
instead of creating one per utterance. Past the pool, recognisers are created on demand (a device should not
wait for another's utterance) and kept idle afterwards up to `max_idle` (`asr.max_idle_per_worker`,
default 4), so steady overlapping speech reuses them instead of paying creation (≈0.45 s CPU) every
utterance, while a larger burst does not pin its peak memory.
Memory therefore scales with the number of *simultaneous utterances*, not connected devices: sessions open a
stream at speech onset and close it at the end of the turn."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class RecogniserPool(Generic[T]):
    def __init__(self, factory: Callable[[], T], warm: int, max_idle: int | None = None) -> None:
        self._factory = factory
        self._max_idle = max(warm, max_idle or warm, 1)
        # A stack of idle recognisers. Bound `_max_idle`; policy: one released past it is dropped (freed).
        self._idle: list[T] = []
        self._lock = threading.Lock()
        self.created = 0
        for _ in range(max(warm, 1)):  # at least one: load errors surface at startup
            self._idle.append(self._create())

    def _create(self) -> T:
        item = self._factory()
        with self._lock:
            self.created += 1
        return item

    def acquire(self) -> T:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        # Past the pool: create on demand (outside the lock, it is slow) rather than make a device wait.
        return self._create()

    def release(self, item: T) -> None:
        with self._lock:
            if len(self._idle) < self._max_idle:
                self._idle.append(item)

    @property
    def idle(self) -> int:
        return len(self._idle)
