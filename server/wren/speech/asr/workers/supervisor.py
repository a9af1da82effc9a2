"""Starting, balancing, restarting and stopping the ASR worker processes (`ProcessAsrEngine`).

- `ProcessAsrEngine(config, workers, max_streams)` starts `workers` processes with the "spawn" start method
  (never fork a threaded server; as with any spawn, the main script must guard its entry point with
  `if __name__ == "__main__":`, because the worker imports it). Each loads the real engine once
  (`workers.child`) with its own warm pool: `ceil(pool_size / workers)` recognisers, so the whole server
  keeps `pool_size` warm as with one process.
- `open_stream(speaker)` picks the live worker with the fewest open streams and returns a
  `ProcessAsrStream` proxy; the next `open` for a speaker carries the cepstral mean its last `finish()`
  brought back (`cmn.SpeakerCmnCache`), so a speaker keeps its adaptation across workers and restarts.
- Bounds (`[limits] asr_streams` = `max_streams`): at most `max_streams` streams open in all (`asr.cap`),
  and at most `ceil(max_streams / workers)` on one worker, which its own engine enforces too (a worker's
  CPU keeps up with only so many speakers, and each stream holds a recogniser there). So while a worker is
  down the others do not take its share: fewer utterances are listened to, none late. Past either bound, or
  with no worker running, `open_stream` raises `AsrUnavailable` at once.
- A worker that dies, or a replacement that fails to load: its pending requests and open streams fail with
  `AsrError` (the session turns that into an utterance without text), and it is restarted from its reader
  thread after a pause that doubles with each failure in a row (`restarts.Backoff`: 0.5 s up to 30 s, reset
  once it stayed up a minute), one log line per change (`asr worker 1 died (exit -9); restarting in 0.5 s`,
  `asr worker 1 healthy again after 1 restart`). A worker that fails to load at startup is not retried: the
  server refuses to start with the reason. Workers are daemonic and also exit when their pipe closes, so
  none outlives the server process, however that ends; `close()` stops them cleanly (the server calls it via
  `SpeechStack.close()`; an atexit hook covers the rest).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import math
import multiprocessing
import threading
import time
import weakref
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, replace

from wren.config import AsrConfig
from wren.speech.asr.cap import StreamCap
from wren.speech.asr.cmn import SpeakerCmnCache
from wren.speech.asr.errors import AsrError, AsrUnavailable
from wren.speech.asr.workers.channel import Open, Stop, WorkerChannel
from wren.speech.asr.workers.child import main as worker_main
from wren.speech.asr.workers.proxy import ProcessAsrStream
from wren.speech.asr.workers.restarts import Backoff, RestartHistory

log = logging.getLogger(__name__)

START_METHOD = "spawn"
READY_TIMEOUT_S = 120.0  # loading pocketsphinx takes ≈1 s; generous for a loaded CI box
EXIT_JOIN_S = 5.0  # how long a reader waits to collect the exit code of a worker whose pipe closed


@dataclass(frozen=True)
class WorkersHealth:
    """What /metrics and the log lines report about the worker processes."""

    workers: int
    up: int  # loaded and answering
    restarts: int  # replacements started since the engine started (only grows)
    streams: int  # open streams, all workers


class WorkerProcess:
    """One worker process, its channel, and the streams it serves; what its exit means for them."""

    def __init__(self, engine: ProcessAsrEngine, index: int) -> None:
        self.engine = engine
        self.index = index
        ctx = multiprocessing.get_context(START_METHOD)
        conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=worker_main, args=(child_conn, engine.worker_config, engine.per_worker_streams),
            name=f"wren-asr-{index}",
            daemon=True,  # multiprocessing terminates daemonic children when this process exits
        )
        self.process.start()
        child_conn.close()  # only the child holds its end: a dead child means EOF here
        self.pid = self.process.pid
        self.streams: weakref.WeakSet[ProcessAsrStream] = weakref.WeakSet()
        self.loaded: Future[None] = Future()
        self.was_ready = False
        self.load_error: str | None = None
        self.timed_out = False  # killed because it did not load within READY_TIMEOUT_S
        self.channel = WorkerChannel(conn, index, self.pid, events=self)
        try:
            self.channel.start()  # last: the reader may report to this object at once
        except RuntimeError:  # no thread to read it: a worker nobody reads must not be left running
            self.process.kill()
            self.process.join(EXIT_JOIN_S)
            raise

    @property
    def alive(self) -> bool:
        return self.channel.alive

    @property
    def load(self) -> int:
        return len(self.streams)

    def wait_ready(self, timeout: float) -> None:
        try:
            self.loaded.result(timeout)
        except FutureTimeout:
            raise AsrError(f"ASR worker {self.index} did not load within {timeout:.0f} s") from None

    # ---- channel events (from the reader thread)

    def on_ready(self, pid: int) -> None:
        self.was_ready = True
        self.loaded.set_result(None)
        self.engine._worker_ready(self)

    def on_load_failed(self, reason: str) -> None:
        self.load_error = reason
        self.loaded.set_exception(AsrError(f"ASR worker failed to load: {reason}"))

    def on_stream_error(self, sid: int, reason: str) -> None:
        # The worker's own share of the ceiling refused it: the same named outcome as a refusal here.
        kind = AsrUnavailable if reason.startswith(f"{AsrUnavailable.__name__}:") else AsrError
        for stream in list(self.streams):
            if stream.sid == sid:
                stream.fail(kind(f"ASR worker: {reason}"))

    def exit_reason(self, code: int | None) -> str:
        """Why the process is gone, for the restart log line."""
        if self.load_error is not None:
            return f"failed to load ({self.load_error})"
        if self.timed_out:
            return f"did not load within {READY_TIMEOUT_S:.0f} s"
        return f"died (exit {code})" if self.was_ready else f"exited while loading (exit {code})"

    def on_closed(self) -> None:
        """The pipe ended: fail whatever waits on this worker, then let the engine replace it."""
        waiters = self.channel.end_requests()
        self.channel.shut("the worker process exited")
        self.process.join(EXIT_JOIN_S)
        code = self.process.exitcode
        error = AsrError(f"ASR worker {self.index} (pid {self.pid}) exited (code {code}) mid-utterance")
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)
        for stream in list(self.streams):
            stream.fail(error)
        if not self.loaded.done():
            self.loaded.set_exception(AsrError(f"ASR worker {self.index} exited (code {code}) while loading"))
        self.channel.close_connection()
        self.engine._worker_exited(self, code)

    def stop(self, timeout: float) -> None:
        with contextlib.suppress(AsrError):
            self.channel.send(Stop())
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout)
        self.channel.shut("stopped")
        self.channel.join(timeout)


class ProcessAsrEngine:
    """`load_asr` returns this when `asr.workers > 0`: the configured engine, run in worker processes."""

    sample_rate = 16000

    def __init__(
        self, config: AsrConfig, workers: int, max_streams: int = 0, backoff: Backoff | None = None
    ) -> None:
        if workers < 1:
            raise ValueError("ProcessAsrEngine needs at least one worker")
        self.name = config.engine.lower()
        per_worker_pool = max(1, math.ceil(config.pool_size / workers))
        self.worker_config = {**asdict(replace(config, pool_size=per_worker_pool)), "workers": 0}
        self.streams = StreamCap(max_streams, self.name)  # all workers together
        self.per_worker_streams = math.ceil(self.streams.limit / workers)  # 0 = no limit
        self._sids = itertools.count(1)
        self._lock = threading.Lock()
        self._closing = False
        self._stopping = threading.Event()  # set by close(): cuts a restart pause short
        self._started = False
        self._cmn = SpeakerCmnCache()  # per-speaker means, carried to whichever worker serves them next
        self.restarts = 0
        self._history = [RestartHistory(backoff or Backoff()) for _ in range(workers)]
        self._restarting: set[WorkerProcess] = set()  # dead workers whose reader thread is replacing them
        started = time.perf_counter()
        # Filled one by one: a worker that dies while loading reports to `_worker_exited` from its reader
        # thread, possibly before this constructor finishes, so the list must already exist.
        self._workers: list[WorkerProcess] = []
        for i in range(workers):
            self._workers.append(WorkerProcess(self, i))
        try:
            for worker in self._workers:
                worker.wait_ready(READY_TIMEOUT_S)
        except AsrError:
            self.close()
            raise
        with self._lock:
            self._started = True
        atexit.register(self.close)
        log.info("asr: %d %s worker processes (pids %s) ready in %.2f s", workers, self.name,
                 ", ".join(str(w.pid) for w in self._workers), time.perf_counter() - started)

    @property
    def worker_pids(self) -> list[int]:
        return [w.pid for w in self._workers if w.pid is not None]

    def health(self) -> WorkersHealth:
        with self._lock:
            workers = list(self._workers)
        return WorkersHealth(len(workers), sum(1 for w in workers if w.alive), self.restarts,
                             sum(w.load for w in workers))

    def open_stream(self, speaker: str | None = None) -> ProcessAsrStream:
        """A stream on the least-loaded live worker with room (fewest open streams); `AsrUnavailable`
        past the ceiling, when every live worker holds its share, or with no worker running."""
        slot = self.streams.take()
        share = self.per_worker_streams
        with self._lock:
            live = [] if self._closing else [w for w in self._workers if w.alive]
            room = [w for w in live if not share or w.load < share]
            worker = min(room, key=lambda w: w.load) if room else None
            if worker is not None:
                stream = ProcessAsrStream(worker, next(self._sids), speaker, self._cmn, slot)
                worker.streams.add(stream)  # counted before the next open picks a worker
        if worker is None:
            slot.release()
            if not live:
                raise self.streams.refuse("no ASR worker is running")
            raise self.streams.refuse(f"every running ASR worker holds its {share} streams")
        cmn = self._cmn.get(speaker) if speaker is not None else None
        try:
            worker.channel.send(Open(stream.sid, speaker, cmn))
        except AsrError as exc:
            stream.fail(exc)
            stream.close()
            raise
        return stream

    def speaker_cmn(self, speaker: str) -> str | None:
        """The mean `speaker`'s last utterance ended with, on whichever worker (None: never heard)."""
        return self._cmn.get(speaker)

    def remember_cmn(self, speaker: str, cmn: str) -> None:
        self._cmn.remember(speaker, cmn)

    # ---- restarts (called from the workers' reader threads)

    def _up(self) -> str:
        live = sum(1 for w in self._workers if w.alive)
        return f"{live} of {len(self._workers)} workers up"

    def _worker_ready(self, worker: WorkerProcess) -> None:
        with self._lock:
            restarts = self._history[worker.index].up()
            summary = self._up()
        if restarts:
            log.info("asr worker %d healthy again after %d restart%s (pid %s; %s)", worker.index, restarts,
                     "" if restarts == 1 else "s", worker.pid, summary)

    def _worker_exited(self, worker: WorkerProcess, code: int | None) -> None:
        """A worker's process is gone: after the backoff pause, replace it (unless closing). Runs on that
        worker's reader thread, which has nothing else to do, so a pause never holds up anything."""
        with self._lock:
            if self._closing or worker not in self._workers:
                return
            if not self._started and not worker.was_ready:
                return  # it never loaded at startup: the constructor reports why, nothing is retried
            delay = self._history[worker.index].failed()
            summary = self._up()
            self._restarting.add(worker)
        log.warning("asr worker %d %s; restarting in %.1f s (%s)", worker.index, worker.exit_reason(code),
                    delay, summary)
        try:
            self._replace(worker, delay)
        finally:
            with self._lock:
                self._restarting.discard(worker)

    def _replace(self, worker: WorkerProcess, delay: float) -> None:
        while True:
            if self._stopping.wait(delay):
                return
            with self._lock:
                if self._closing:
                    return
                try:
                    replacement = WorkerProcess(self, worker.index)
                except (OSError, RuntimeError) as exc:  # not even started (out of memory, processes or
                    failure: Exception | None = exc  # threads): a failure too, retried the same way
                    delay = self._history[worker.index].failed()
                    summary = self._up()
                else:
                    failure = None
                    self._workers[self._workers.index(worker)] = replacement
                    self.restarts += 1
            if failure is None:
                break
            log.warning("asr worker %d could not be started (%s); restarting in %.1f s (%s)", worker.index,
                        failure, delay, summary)
        try:
            replacement.wait_ready(READY_TIMEOUT_S)
        except AsrError:
            if not replacement.loaded.done():  # hung while loading: its exit leads to the next restart
                replacement.timed_out = True
                replacement.process.kill()
            # otherwise it failed to load or died: its own reader thread reports that, and restarts it

    def wait_all_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Block until every worker (including one being restarted) has loaded (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                workers = list(self._workers)
            if all(w.alive for w in workers):
                return
            if time.monotonic() > deadline:
                raise AsrError("ASR workers not ready")
            time.sleep(0.05)

    def close(self, timeout: float = 5.0) -> None:
        """Stop every worker (idempotent). Open streams fail with AsrError."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self._stopping.set()
        with self._lock:  # after _closing: no restart starts a new worker any more
            workers, restarting = list(self._workers), list(self._restarting)
        for worker in workers:
            worker.stop(timeout)
        for worker in restarting:  # their reader threads leave their pause at once now
            worker.channel.join(timeout)
        atexit.unregister(self.close)
