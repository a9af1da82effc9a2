"""Starting, balancing, restarting and stopping the ASR worker processes (`ProcessAsrEngine`).

- `ProcessAsrEngine(config, workers)` starts `workers` processes with the "spawn" start method (never fork
  a threaded server; as with any spawn, the main script must guard its entry point with
  `if __name__ == "__main__":`, because the worker imports it). Each loads the real engine once
  (`workers.child`) with its own warm pool: `ceil(pool_size / workers)` recognisers, so the whole server
  keeps `pool_size` warm as with one process.
- `open_stream(speaker)` picks the live worker with the fewest open streams and returns a
  `ProcessAsrStream` proxy; the next `open` for a speaker carries the cepstral mean its last `finish()`
  brought back (`cmn.SpeakerCmnCache`), so a speaker keeps its adaptation across workers and restarts.
- A worker that dies: its pending requests and open streams fail with `AsrError` (the session turns that
  into an utterance without text), and it is restarted in the background. Workers are daemonic and also
  exit when their pipe closes, so none outlives the server process, however that ends; `close()` stops
  them cleanly (the server calls it via `SpeechStack.close()`; an atexit hook covers the rest).
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
from dataclasses import asdict, replace

from wren.config import AsrConfig
from wren.speech.asr.cmn import SpeakerCmnCache
from wren.speech.asr.errors import AsrError
from wren.speech.asr.workers.channel import Open, Stop, WorkerChannel
from wren.speech.asr.workers.child import main as worker_main
from wren.speech.asr.workers.proxy import ProcessAsrStream

log = logging.getLogger(__name__)

START_METHOD = "spawn"
READY_TIMEOUT_S = 120.0  # loading pocketsphinx takes ≈1 s; generous for a loaded CI box
RESTART_DELAY_S = 0.5
EXIT_JOIN_S = 5.0  # how long a reader waits to collect the exit code of a worker whose pipe closed


class WorkerProcess:
    """One worker process, its channel, and the streams it serves; what its exit means for them."""

    def __init__(self, engine: ProcessAsrEngine, index: int) -> None:
        self.engine = engine
        self.index = index
        ctx = multiprocessing.get_context(START_METHOD)
        conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=worker_main, args=(child_conn, engine.worker_config), name=f"wren-asr-{index}",
            daemon=True,  # multiprocessing terminates daemonic children when this process exits
        )
        self.process.start()
        child_conn.close()  # only the child holds its end: a dead child means EOF here
        self.pid = self.process.pid
        self.streams: weakref.WeakSet[ProcessAsrStream] = weakref.WeakSet()
        self.loaded: Future[None] = Future()
        self.channel = WorkerChannel(conn, index, self.pid, events=self)
        self.channel.start()  # last: the reader may report to this object at once

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
        self.loaded.set_result(None)

    def on_load_failed(self, reason: str) -> None:
        self.loaded.set_exception(AsrError(f"ASR worker failed to load: {reason}"))

    def on_stream_error(self, sid: int, reason: str) -> None:
        for stream in list(self.streams):
            if stream.sid == sid:
                stream.fail(AsrError(f"ASR worker: {reason}"))

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

    def __init__(self, config: AsrConfig, workers: int) -> None:
        if workers < 1:
            raise ValueError("ProcessAsrEngine needs at least one worker")
        self.name = config.engine.lower()
        per_worker_pool = max(1, math.ceil(config.pool_size / workers))
        self.worker_config = {**asdict(replace(config, pool_size=per_worker_pool)), "workers": 0}
        self._sids = itertools.count(1)
        self._lock = threading.Lock()
        self._closing = False
        self._cmn = SpeakerCmnCache()  # per-speaker means, carried to whichever worker serves them next
        self.restarts = 0
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
        atexit.register(self.close)
        log.info("asr: %d %s worker processes (pids %s) ready in %.2f s", workers, self.name,
                 ", ".join(str(w.pid) for w in self._workers), time.perf_counter() - started)

    @property
    def worker_pids(self) -> list[int]:
        return [w.pid for w in self._workers if w.pid is not None]

    def open_stream(self, speaker: str | None = None) -> ProcessAsrStream:
        """A stream on the least-loaded live worker (fewest open streams)."""
        with self._lock:
            live = [w for w in self._workers if w.alive]
            if self._closing or not live:
                raise AsrError("no ASR worker is running")
            worker = min(live, key=lambda w: w.load)
            stream = ProcessAsrStream(worker, next(self._sids), speaker, self._cmn)
            worker.streams.add(stream)  # counted before the next open picks a worker
        cmn = self._cmn.get(speaker) if speaker is not None else None
        try:
            worker.channel.send(Open(stream.sid, speaker, cmn))
        except AsrError as exc:
            stream.fail(exc)
            raise
        return stream

    def speaker_cmn(self, speaker: str) -> str | None:
        """The mean `speaker`'s last utterance ended with, on whichever worker (None: never heard)."""
        return self._cmn.get(speaker)

    def remember_cmn(self, speaker: str, cmn: str) -> None:
        self._cmn.remember(speaker, cmn)

    def _worker_exited(self, worker: WorkerProcess, code: int | None) -> None:
        """Called by a worker's reader thread once its process is gone: replace it unless closing."""
        with self._lock:
            if self._closing or worker not in self._workers or not worker.loaded.done():
                return
            if worker.loaded.exception() is not None:
                return  # it never loaded: restarting would fail the same way
        log.warning("asr: worker %d (pid %s) exited (code %s); restarting", worker.index, worker.pid, code)
        time.sleep(RESTART_DELAY_S)
        with self._lock:
            if self._closing:
                return
            replacement = WorkerProcess(self, worker.index)
            self._workers[self._workers.index(worker)] = replacement
            self.restarts += 1
        try:
            replacement.wait_ready(READY_TIMEOUT_S)
            log.info("asr: worker %d restarted (pid %s)", replacement.index, replacement.pid)
        except AsrError as exc:
            log.error("asr: worker %d could not be restarted: %s", replacement.index, exc)

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
            workers = list(self._workers)
        for worker in workers:
            worker.stop(timeout)
        atexit.unregister(self.close)
