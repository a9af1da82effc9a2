"""Blocking jobs of many sessions on a few threads, with one event-loop wake-up per batch of results.

Why not `ThreadPoolExecutor` + `asyncio.wrap_future`: every 60 ms uplink frame of every device is one short
job (decode, VAD, turn detection: ≈70 µs with the VAD gated). With the stock pool each job pays a
`concurrent.futures.Future` (a condition variable of its own), the chained asyncio future, and its own
`call_soon_threadsafe` (a write to the loop's self-pipe and one more loop iteration). Profiled with 20
streaming devices, that hand-off held the GIL longer than the jobs did (21 % of all GIL time against 9 %).
Here a job is an asyncio future plus a deque entry. Each worker takes one job at a time (so a slow job never
keeps others from starting: the other worker takes them), and holds the results back while more jobs are
waiting, handing them all to the loop in one `call_soon_threadsafe` when the queue is empty, when
`MAX_BATCH` are held, when the oldest has waited `MAX_HOLD_S`, or before a job submitted as `may_block`
(a recogniser's finish, which can wait for a decode: no finished frame waits behind it). Under load the
batches grow and the per-frame cost falls; with one device it is one job per wake-up, as before.

`submit_together` jobs of one function queued one behind another run as one call (the uplink frames of all
sessions waiting: their VAD is one model run per window, `wren.pipeline.uplink.feed_together`), so the
busier the server, the less each frame costs.

Semantics the sessions rely on (those of the pool it replaces): jobs start in submission order; a job whose
awaiting task is cancelled still runs to completion (await it through `asyncio.shield`, as
`wren.session.listening` does, so a session can wait for its last job before releasing what it uses);
`shutdown()` cancels jobs not started yet, and `submit` after it raises RuntimeError.

On the loop (`on_loop`, the server's choice when the recogniser's feed never blocks): jobs not `may_block`
run on the event loop's own thread instead, every job submitted since the last round in one `call_soon`
callback (the `submit_together` items of one function in calls of at most MAX_TOGETHER, the callback
handing the rest to the next loop round). Why: a listen thread holds the GIL in Python for most of a job,
so the event loop, which drops the GIL at every socket read and `select()`, waited to get it back
thousands of times a second; at 200 streaming devices that hand-off, not the work, was the limit
(docs/performance.md, round 10: uplink lag p99 5.1 / 1.1 s → 570 / 680 ms in two pairs). The work is the
same (decode, batched VAD, turn detection, feeding the recogniser, ≈70-100 µs a frame); a job that may
wait on something else (`may_block`: a recogniser's finish) still goes to the threads.

Bound: none of its own, by design. Each session waits for its job before submitting the next, so at most one
job per session is ever waiting; the sessions are bounded by `[limits] connections`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

MAX_BATCH = 64  # results handed back per wake-up, at most
MAX_HOLD_S = 0.002  # a finished result waits at most this long (plus the job then running) for company
MAX_TOGETHER = 64  # items of one `submit_together` function run in one call, at most

Together = Callable[[list[Any]], list[Any]]  # items → one outcome each (an exception instance: it failed)
# loop, future, fn (or the item of a `together` function), args, may_block, together
_Job = tuple[
    asyncio.AbstractEventLoop, "asyncio.Future[Any]", Any, tuple[Any, ...], bool, "Together | None"
]
_Done = tuple["asyncio.Future[Any]", Any, BaseException | None]


class BatchedExecutor:
    def __init__(self, workers: int, name: str, on_loop: bool = False) -> None:
        self.workers = max(1, workers)
        self.name = name
        self.on_loop = on_loop  # jobs not `may_block` run on the event loop (see the module docstring)
        self._jobs: deque[_Job] = deque()  # at most one per session (see the module docstring)
        self._looped: list[_Job] = []  # jobs for the loop's next round (`on_loop`), also one per session
        self._ready = threading.Condition()
        self._idle = 0  # workers waiting for jobs
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True) for i in range(self.workers)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def waiting(self) -> int:
        """Jobs not yet started (the metrics' queue depth)."""
        return len(self._jobs) + len(self._looped)

    def submit(self, fn: Callable[..., Any], *args: Any, may_block: bool = False) -> asyncio.Future[Any]:
        """`may_block`: the job may wait on something else (results held back are handed over first)."""
        return self._add(fn, args, may_block, None)

    def submit_together(self, together: Together, item: Any) -> asyncio.Future[Any]:
        """Run `together([item, ...])` with the items of the jobs of the same function queued right behind
        this one when a worker takes it (at most MAX_TOGETHER; one per session, since a session waits for
        its job): the work of many sessions in one call, e.g. their VAD in one model run. The future gets
        this item's outcome, or its exception if the outcome is one."""
        return self._add(item, (), False, together)

    def _add(self, fn: Any, args: tuple[Any, ...], may_block: bool, together: Together | None
             ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        job = (loop, future, fn, args, may_block, together)
        if self.on_loop and not may_block:
            if self._closed:
                raise RuntimeError(f"{self.name}: cannot schedule new work after shutdown")
            self._looped.append(job)
            if len(self._looped) == 1:  # the first since the last round: the round runs them all
                loop.call_soon(self._run_looped)
            return future
        with self._ready:
            if self._closed:
                raise RuntimeError(f"{self.name}: cannot schedule new work after shutdown")
            self._jobs.append(job)
            if self._idle:
                self._ready.notify()
        return future

    def _run_looped(self) -> None:
        """One loop round of `on_loop` jobs: plain jobs one by one, the items of a together function in
        calls of at most MAX_TOGETHER; past that, the rest wait for the next round (so the loop serves
        sockets between batches), with whatever was submitted meanwhile."""
        jobs, self._looped = self._looped, []
        together: dict[Any, list[_Job]] = {}
        done: list[_Done] = []
        left: list[_Job] = []
        for job in jobs:
            if job[5] is None:
                done.extend(outcome for _, outcome in self._run([job]))
                continue
            group = together.setdefault(job[5], [])
            (group if len(group) < MAX_TOGETHER else left).append(job)
        for group in together.values():
            done.extend(outcome for _, outcome in self._run(group))
        _resolve(done)
        if left and self._closed:  # shut down from another thread meanwhile: not started, so cancelled
            _resolve([(job[1], None, asyncio.CancelledError()) for job in left])
        elif left:  # the round runs no awaits, so nothing was submitted during it: _looped is empty
            self._looped = left
            left[0][0].call_soon(self._run_looped)

    def shutdown(self, wait: bool = False) -> None:
        """No new jobs; jobs not started are cancelled; running ones finish (`wait`: wait for them)."""
        with self._ready:
            self._closed = True
            pending = list(self._jobs) + self._looped
            self._jobs.clear()
            self._looped = []
            self._ready.notify_all()
        for loop, future, *_job in pending:
            _call_soon(loop, future.cancel)
        if wait:
            for thread in self._threads:
                thread.join()

    def _take(self, wait: bool) -> list[_Job]:
        """The next job, with the `submit_together` jobs of the same function queued right behind it (at most
        MAX_TOGETHER: under load the queue is mostly one session's frames after another's); [] if there is
        none (`wait`: only once closed and empty)."""
        with self._ready:
            while not self._jobs:
                if self._closed or not wait:
                    return []
                self._idle += 1
                self._ready.wait()
                self._idle -= 1
            taken = [self._jobs.popleft()]
            together = taken[0][5]
            while together is not None and self._jobs and self._jobs[0][5] is together \
                    and len(taken) < MAX_TOGETHER:
                taken.append(self._jobs.popleft())
            return taken

    def _work(self) -> None:
        held: list[tuple[asyncio.AbstractEventLoop, _Done]] = []  # finished, not yet handed back
        held_since = 0.0
        while True:
            jobs = self._take(wait=not held)
            if not jobs or (held and (jobs[0][4] or time.monotonic() - held_since >= MAX_HOLD_S)):
                _hand_back(held)
                held = []
            if not jobs:
                if self._closed and not self._jobs:
                    return
                continue
            if not held:
                held_since = time.monotonic()
            held.extend(self._run(jobs))
            if jobs[0][4] or len(held) >= MAX_BATCH:
                _hand_back(held)
                held = []

    @staticmethod
    def _run(jobs: list[_Job]) -> list[tuple[asyncio.AbstractEventLoop, _Done]]:
        """One plain job, or the jobs of one `together` function in one call."""
        loop, future, fn, args, _may_block, together = jobs[0]
        if together is None:
            try:
                return [(loop, (future, fn(*args), None))]
            except BaseException as exc:  # handed to the awaiting task, as a pool's future would
                return [(loop, (future, None, exc))]
        try:
            outcomes = together([job[2] for job in jobs])
        except BaseException as exc:  # the call as a whole failed: every item of it did
            outcomes = [exc] * len(jobs)
        return [
            (job[0], (job[1], None, out) if isinstance(out, BaseException) else (job[1], out, None))
            for job, out in zip(jobs, outcomes, strict=True)
        ]


def _hand_back(held: list[tuple[asyncio.AbstractEventLoop, _Done]]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[_Done]] = {}
    for loop, outcome in held:
        by_loop.setdefault(loop, []).append(outcome)
    for loop, results in by_loop.items():
        _call_soon(loop, _resolve, results)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # the loop is closed: nobody is waiting for these any more
        log.debug("results for a closed event loop dropped")


def _resolve(results: list[_Done]) -> None:
    for future, result, exc in results:
        if future.cancelled():
            continue
        if exc is None:
            future.set_result(result)
        elif isinstance(exc, asyncio.CancelledError):
            future.cancel()
        else:
            future.set_exception(exc)
