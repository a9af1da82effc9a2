"""Speech synthesis of every session on the speak workers, earliest deadline first (issue 11).

All replies of all devices compete for the same few cores. Before this, each turn's synthesis jobs went
into the speak executor's FIFO as soon as its synthesise stage could run, so a long reply queued its later
sentences ahead of another device's first clause. Here every job (one TTS chunk + its encoding: see
wren.pipeline.synthesise) carries two times, both on the monotonic clock:

- `deadline`: when a person would notice the job is late. The first clause of a reply: now (someone is
  waiting for the first word). A later sentence: when the device's playback reaches it (what the pacer
  has queued ahead) minus a small lead (`PLAYBACK_LEAD_S`), so it is ready before it is needed.
- `release`: when it may start at all, `RELEASE_AHEAD_S` before its deadline. Later sentences of a long
  reply are thus synthesised just in time, a little ahead of the pacer, and not all at once while an idle
  worker happens to be free: a worker busy with audio nobody needs for seconds is a worker another
  device's first clause would wait for (a job cannot be pre-empted once it runs).

A job known to take milliseconds (a reply's first chunk from the TTS phrase cache: resample and encode
only) is ordered as if due `CHEAP_AHEAD_S` earlier. On a full box a reply that begins with a cached phrase
then starts at once instead of waiting seconds behind other replies' synthesis, and each such job delays
those by a few milliseconds only.

Of the released jobs the one with the earliest deadline runs next (ties: first submitted). At most
`workers` jobs run at once, one per executor thread, so the executor's own FIFO never holds a backlog:
every ordering decision is made here, with the deadlines in hand.

Bound and overflow policy: at most `max_jobs` jobs wait. A synthesise stage has at most one job waiting
(it awaits each), so the bound is only reached with more live replies than that. Then the least urgent job
(latest deadline, possibly the new one) is refused with `TtsOverloaded`: its stage treats it as a TTS
failure of that chunk (the reply goes on; `tts stop` still follows).

Cancellation: a job whose awaiting task is cancelled (abort, barge-in, socket gone: the turn's pipeline is
cancelled) leaves the queue at once; `cancel_turn(turn)` drops every waiting job of a turn. A job already
running finishes in its thread (piper cannot be interrupted) and its result is dropped.

`trace` keeps the last `TRACE_JOBS` jobs started (who, which chunk, deadline, when submitted and started):
the tests read the order of synthesis from it, and it is cheap enough to keep always.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

PLAYBACK_LEAD_S = 1.0  # a later sentence is due this long before the device's playback reaches it
RELEASE_AHEAD_S = 2.0  # ... and may start at most this long before it is due (≤ 3 s ahead of playback)
CHEAP_AHEAD_S = 5.0  # a cheap job's place in the queue: as if due this much earlier (module docstring)
MAX_JOBS = 1024  # jobs waiting; past it the least urgent is refused (module docstring)
TRACE_JOBS = 512  # jobs started, kept for tests and post-mortems


class TtsOverloaded(RuntimeError):
    """More synthesis jobs waiting than the scheduler holds; this, the least urgent one, was refused."""


@dataclass(frozen=True)
class Started:
    """One job as it began running (the trace)."""

    turn: str  # the turn's name (device and turn number)
    chunk: int  # 0 = the reply's first job
    deadline: float
    submitted: float
    started: float


@dataclass(order=True)
class _Job:
    rank: float  # its place in the queue: the deadline, CHEAP_AHEAD_S earlier for a cheap job
    seq: int
    deadline: float = field(compare=False)
    release: float = field(compare=False)
    turn: Any = field(compare=False)
    name: str = field(compare=False)
    chunk: int = field(compare=False)
    submitted: float = field(compare=False)
    fn: Callable[..., Any] = field(compare=False)
    args: tuple[Any, ...] = field(compare=False)
    future: asyncio.Future[Any] = field(compare=False)
    waiting: bool = field(default=True, compare=False)  # False once started or dropped


class TtsScheduler:
    """One per process, shared by all sessions; every method is called on the event loop."""

    def __init__(self, executor: Executor, workers: int, *, max_jobs: int = MAX_JOBS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._executor = executor
        self.workers = max(1, workers)
        self.max_jobs = max(1, max_jobs)
        self.clock = clock
        # Two heaps of the same waiting jobs' entries: by release time (not yet startable) and by deadline
        # (startable). Bound: `max_jobs` between them; overflow: refuse the least urgent (module docstring).
        self._held: list[tuple[float, int, _Job]] = []
        self._ready: list[_Job] = []
        self._waiting = 0
        self._seq = itertools.count()
        self.running = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self.trace: deque[Started] = deque(maxlen=TRACE_JOBS)
        self.refused = 0

    @property
    def waiting(self) -> int:
        """Jobs submitted and neither started nor dropped (the /metrics queue depth)."""
        return self._waiting

    async def run(self, fn: Callable[..., Any], *args: Any, deadline: float, release: float | None = None,
                  turn: Any = None, name: str = "", chunk: int = 0, cheap: bool = False) -> Any:
        """Run `fn(*args)` on a speak worker when its turn comes; returns (or raises) what it does.
        `cheap`: the job takes milliseconds (module docstring)."""
        job = self.submit(fn, *args, deadline=deadline, release=release, turn=turn, name=name, chunk=chunk,
                          cheap=cheap)
        try:
            return await job.future
        except asyncio.CancelledError:
            self._drop(job)  # nobody waits for it any more: it must not take a worker
            raise

    def submit(self, fn: Callable[..., Any], *args: Any, deadline: float, release: float | None = None,
               turn: Any = None, name: str = "", chunk: int = 0, cheap: bool = False) -> _Job:
        loop = asyncio.get_running_loop()
        now = self.clock()
        release = now if release is None else min(release, deadline)  # none given: it may start at once
        rank = deadline - CHEAP_AHEAD_S if cheap else deadline  # its place in the queue, not its release
        job = _Job(rank, next(self._seq), deadline, release, turn, name, chunk, now, fn, args,
                   loop.create_future())
        if self._waiting >= self.max_jobs:
            victim = max(self._jobs(), default=job)
            if job.rank >= victim.rank:
                victim = job
            self.refused += 1
            log.warning("tts: %d synthesis jobs waiting; refusing the least urgent (%s)", self._waiting,
                        victim.name or "a job")
            victim.future.set_exception(TtsOverloaded("too many synthesis jobs waiting"))
            if victim is job:
                return job
            self._drop(victim)
        heapq.heappush(self._held, (job.release, job.seq, job))
        self._waiting += 1
        self._dispatch()
        return job

    def cancel_turn(self, turn: Any) -> int:
        """Drop every waiting job of `turn` (its reply was cut off); returns how many were dropped."""
        dropped = [job for job in self._jobs() if job.turn is turn]
        for job in dropped:
            self._drop(job)
            job.future.cancel()
        return len(dropped)

    def poke(self) -> None:
        """Look at the queue again now (the release timer does this; tests on a fake clock call it)."""
        self._dispatch()

    # ---- inside --------------------------------------------------------------------------------------

    def _jobs(self) -> list[_Job]:
        """The jobs still waiting (held or ready)."""
        return [job for job in [entry[2] for entry in self._held] + self._ready if job.waiting]

    def _drop(self, job: _Job) -> None:
        if not job.waiting:
            return
        job.waiting = False  # removed from its heap lazily, when it reaches the top ...
        self._waiting -= 1
        if len(self._held) + len(self._ready) > 2 * self._waiting + 64:  # ... or now, if many are dead
            self._held = [entry for entry in self._held if entry[2].waiting]
            self._ready = [j for j in self._ready if j.waiting]
            heapq.heapify(self._held)
            heapq.heapify(self._ready)

    def _dispatch(self) -> None:
        now = self.clock()
        while self._held and self._held[0][0] <= now:
            job = heapq.heappop(self._held)[2]
            if job.waiting:
                heapq.heappush(self._ready, job)
        while self.running < self.workers and self._ready:
            job = heapq.heappop(self._ready)
            if job.waiting:
                self._start(job, now)
        self._arm_timer(now)

    def _start(self, job: _Job, now: float) -> None:
        self._drop(job)  # no longer waiting: neither cancel_turn nor overflow touches it now
        self.running += 1
        self.trace.append(Started(job.name, job.chunk, job.deadline, job.submitted, now))
        loop = asyncio.get_running_loop()
        try:
            work = loop.run_in_executor(self._executor, job.fn, *job.args)
        except RuntimeError as exc:  # the executor was shut down (the server is stopping)
            self.running -= 1
            job.future.set_exception(exc)
            return
        work.add_done_callback(lambda done: self._finished(job, done))

    def _finished(self, job: _Job, done: asyncio.Future[Any]) -> None:
        self.running -= 1
        if not job.future.done():  # else the turn went away meanwhile: its result is dropped
            if done.cancelled():
                job.future.cancel()
            elif done.exception() is not None:
                job.future.set_exception(done.exception())  # type: ignore[arg-type]
            else:
                job.future.set_result(done.result())
        elif not done.cancelled():
            done.exception()  # retrieved: an abandoned job's failure is not "never retrieved" noise
        self._dispatch()

    def _arm_timer(self, now: float) -> None:
        """Wake when the next held job is released, if nothing else will (a start or a finish does)."""
        while self._held and not self._held[0][2].waiting:
            heapq.heappop(self._held)
        if not self._held or self.running >= self.workers:
            return  # a finishing job dispatches again
        at = self._held[0][0]
        if self._timer is not None and self._timer_at is not None and self._timer_at <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = asyncio.get_running_loop().call_later(max(0.0, at - now), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        self._dispatch()
