"""A small priority executor for Moonshine decodes: urgent work first, speculation only when idle.

Three classes of work, in this order:
- URGENT: a person is waiting (the utterance ended and no speculative result covers it);
- COMMIT: a finished window of a long utterance (needed before the utterance's end);
- SPECULATIVE: a guess at a pause, useful only if the person stays quiet.
Within a class, first come first served. `threads` jobs run at once (each ONNX Runtime inference on one
core), which is the engine's bound on concurrency. `spill_threads` more run URGENT jobs only: when several
people finish at the same instant and wait, their decodes spread over more cores, while the steady work of
many devices streaming (guesses at pauses, done before the turn ends) stays off the core the event loop
needs (docs/performance.md, round 14). A guess still queued when its utterance ends is resubmitted as
URGENT by the engine, so it may take a spill thread. The spill threads run at nice `SPILL_NICE`: they are
extra hands for spare cores, so when the event loop (every device's audio) wants the core too, the loop
gets it first (round 15: at 200 streaming devices, lag p99 median 58 against 92 ms in six pairs; ten
people finishing at once, first audio p95 the same, p50 ≈ 100 ms later).

Overflow policy: at most `max_speculative` (`MAX_WAITING_SPECULATIVE`) speculative jobs wait; past that
the OLDEST waiting one is cancelled (its stream then decodes at its end, as without speculation). Urgent
and commit jobs are never dropped: they are bounded by the open streams (one urgent job per stream, since
`finish()` waits for it, and one commit per finished window: a few per utterance, whose length the
session caps), and streams are bounded by the sessions. Cancelled jobs (superseded guesses, closed
streams) leave the queue when a decode thread reaches them, or sooner, at the next speculative submit.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from wren.speech.priority import lower_this_thread

log = logging.getLogger(__name__)

URGENT, COMMIT, SPECULATIVE = 0, 1, 2
CLASS_NAMES = ("urgent", "commit", "speculative")  # by priority, for counters
MAX_WAITING_SPECULATIVE = 32  # guesses waiting for a decode thread; past it: drop the oldest guess
SPILL_NICE = 5  # the spill threads' OS priority (Linux, per thread; wren.speech.priority); steady ones keep 0


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, e.g. a container's cpuset), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def default_decode_threads(cpus: int) -> int:
    """Decode threads when `asr.decode_threads` is 0: one core left to the event loop, which moves every
    device's audio, so one on a 2-core box and at most 4. With 200 streaming devices on 2 cores, one
    thread instead of two gave a lower uplink lag p99 in 6 pairs of 6 (median 77 against 120 ms) and the
    words no later. A spill thread takes only the decodes someone is already waiting for (the scheduler),
    for the moments when several people finish at once (docs/performance.md, round 14)."""
    return max(1, min(4, cpus - 1))


def thread_plan(threads: int) -> tuple[int, int]:
    """(steady threads, spill threads) for `asr.decode_threads`: a count that was set is the count; with 0,
    `default_decode_threads`, and the core left to the event loop still takes the decodes of someone
    already waiting (several people finishing at once)."""
    if threads:
        return threads, 0
    cpus = usable_cpus()
    steady = default_decode_threads(cpus)
    return steady, 1 if cpus > steady else 0


class DecodeScheduler:
    def __init__(
        self, threads: int, max_speculative: int = MAX_WAITING_SPECULATIVE, spill_threads: int = 0
    ) -> None:
        # The queue: (priority, arrival, future, job). Bound and policy: the module docstring (speculative
        # jobs past `max_speculative`: drop the oldest; urgent and commit jobs: bounded by the streams).
        self._heap: list[tuple[int, int, Future, Callable[[], Any]]] = []
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._max_speculative = max_speculative
        self._closed = False
        self.dropped_speculative = 0
        # Per class name: decodes run to the end, and their CPU seconds (the decode threads' own time: ONNX
        # Runtime runs each inference on the calling thread). `/metrics` shows them, e.g. how much of the
        # recogniser's CPU goes to guesses the speaker then spoke past.
        self.ran = dict.fromkeys(CLASS_NAMES, 0)
        self.cpu_seconds = dict.fromkeys(CLASS_NAMES, 0.0)
        self._threads = [
            threading.Thread(target=self._run, args=(False,), name=f"wren-moonshine-{i}", daemon=True)
            for i in range(threads)
        ] + [
            threading.Thread(target=self._run, args=(True,), name=f"wren-moonshine-spill-{i}", daemon=True)
            for i in range(spill_threads)
        ]
        self._steady = threads
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[[], Any], priority: int) -> Future:
        future: Future = Future()
        with self._ready:
            if self._closed:
                future.set_exception(RuntimeError("the Moonshine scheduler is closed"))
                return future
            heapq.heappush(self._heap, (priority, next(self._order), future, fn))
            if priority == SPECULATIVE:
                self._shed_speculation()
            self._ready.notify_all()  # a spill thread woken alone would leave a non-urgent job
        return future

    def _shed_speculation(self) -> None:
        # Cancelled entries would otherwise stay until a (possibly busy) decode thread pops them; the scan
        # below is over the whole heap anyway, so leave them out of it for good.
        self._heap = [entry for entry in self._heap if not entry[2].cancelled()]
        heapq.heapify(self._heap)
        waiting = [entry for entry in self._heap if entry[0] == SPECULATIVE]
        while len(waiting) > self._max_speculative:
            oldest = min(waiting, key=lambda entry: entry[1])
            waiting.remove(oldest)
            oldest[2].cancel()
            self.dropped_speculative += 1

    @property
    def threads(self) -> int:
        """Decodes that run at once at a steady load (spill threads not counted)."""
        return self._steady

    @property
    def spill_threads(self) -> int:
        return len(self._threads) - self._steady

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def waiting(self) -> int:
        """Decodes waiting for a thread, cancelled ones left out (the server's `/metrics`)."""
        with self._ready:
            return sum(1 for entry in self._heap if not entry[2].cancelled())

    def _run(self, spill: bool) -> None:
        if spill:
            lower_this_thread(SPILL_NICE)
        while True:
            with self._ready:
                while True:
                    if self._closed and not self._heap:
                        return
                    if self._heap and (not spill or self._heap[0][0] == URGENT):
                        break
                    self._ready.wait()
                priority, _, future, fn = heapq.heappop(self._heap)
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while waiting (superseded or shed)
            started = time.thread_time()
            try:
                result = fn()
            except BaseException as exc:  # handed to whoever waits on the future
                self._ran(priority, started)
                future.set_exception(exc)
                continue
            self._ran(priority, started)  # counted before anyone waiting on the result wakes
            future.set_result(result)

    def _ran(self, priority: int, started: float) -> None:
        spent, name = time.thread_time() - started, CLASS_NAMES[priority]
        with self._ready:  # two threads may finish at once
            self.ran[name] += 1
            self.cpu_seconds[name] += spent

    def close(self) -> None:
        with self._ready:
            self._closed = True
            for _, _, future, _ in self._heap:
                future.cancel()
            self._heap.clear()
            self._ready.notify_all()
