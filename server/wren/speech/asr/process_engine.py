"""Streaming ASR in worker processes, behind the same `AsrEngine`/`AsrStream` contract.

Why: pocketsphinx's Python binding holds the GIL while it decodes, so in the server process two ASR threads
ran slower than one and every call stalled the event loop (up to ≈60 ms); with 20 people speaking at once
uplink handling fell ≈16 s behind on a 2-core box. A worker process has its own GIL.

Shape:
- `ProcessAsrEngine(config, workers)` starts `workers` processes with the "spawn" start method (never fork a
  threaded server; as with any spawn, the main script must guard its entry point with
  `if __name__ == "__main__":`, because the worker imports it). Each loads the real engine once
  (`load_asr` with `workers = 0`) with its own warm pool (`ceil(pool_size / workers)` recognisers, so the
  whole server keeps `pool_size` warm as before) and then serves requests from one pipe, one at a time, in
  arrival order.
- `open_stream(speaker)` picks the worker with the fewest open streams and returns a `ProcessAsrStream`
  proxy. Every message to a worker goes through its outbox, which one sender thread per worker writes to
  the pipe in order, so `accept(pcm)` never blocks the caller (no round trip per frame, and no waiting
  on a full 64 KB pipe: that stalled the listen thread, and with it the uplink of every other device);
  `partial()`/`finish()` queue a request with an id behind the stream's audio and wait for the reply,
  which the worker's reader thread in this process hands over; `close()` tells the worker to release.
- Overflow policy (a worker hopelessly behind, e.g. a box far past its capacity): audio queued for one
  worker is bounded to `MAX_QUEUED_AUDIO_S` seconds. The `accept()` that would pass the bound fails its
  own stream with `AsrError` (loudly, never a silent gap in the words: the session ends that utterance
  as a turn without text, the normal empty-input path), its queued audio is withdrawn and the worker is
  told to release it, so the worker catches up for the other streams. Control messages are never refused.
- Per-device cepstral mean (pocketsphinx CMN, see pocketsphinx_engine): `finish()` returns the speaker's mean
  along with the words, this process remembers it, and the next `open` for that speaker carries it to
  whichever worker gets the stream. A speaker keeps its adaptation across workers and worker restarts.
- A worker that dies: its pending requests and open streams fail with `AsrError` (the session turns that
  into an utterance without text), and it is restarted in the background. Workers are daemonic and also exit
  when their pipe closes, so none outlives the server process, however that ends; `close()` stops them
  cleanly (the server calls it via `SpeechStack.close()`; an atexit hook covers the rest).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import math
import multiprocessing
import os
import signal
import threading
import time
import weakref
from collections import OrderedDict, deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, replace
from typing import Any

from wren.config import AsrConfig
from wren.speech.asr import AsrError

log = logging.getLogger(__name__)

START_METHOD = "spawn"
READY_TIMEOUT_S = 120.0  # loading pocketsphinx takes ≈1 s; generous for a loaded CI box
REPLY_TIMEOUT_S = 60.0  # partial()/finish() of one utterance; a live worker answers in milliseconds
RESTART_DELAY_S = 0.5
# Audio waiting in one worker's outbox beyond which the stream that adds more fails (see the overflow
# policy above). A worker keeps up with ≈5 speakers at once (RTF ≈0.2 each), so 20 s of audio queued
# means it is seconds behind real time: that utterance's words would come far too late to be useful.
MAX_QUEUED_AUDIO_S = 20.0
MAX_QUEUED_AUDIO_BYTES = int(MAX_QUEUED_AUDIO_S * 16000 * 2)
MAX_REMEMBERED_SPEAKERS = 4096


# ---------------------------------------------------------------- worker process side


def _worker_main(conn: Any, config_fields: dict[str, Any]) -> None:
    """Entry point of a worker process: load the engine, then serve the pipe until it closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the parent decides
    from wren.speech.asr import load_asr

    try:
        engine = load_asr(AsrConfig(**{**config_fields, "workers": 0}))
    except Exception as exc:  # report any load failure to the parent instead of dying silently
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", os.getpid()))
    streams: dict[int, Any] = {}
    errors: dict[int, str] = {}  # a stream whose accept() failed answers its next request with the error
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the server went away
        op = message[0]
        if op == "stop":
            return
        try:
            if op == "accept":
                _, sid, pcm = message
                if sid in streams and sid not in errors:
                    try:
                        streams[sid].accept(pcm)
                    except Exception as exc:
                        errors[sid] = f"{type(exc).__name__}: {exc}"
                        conn.send(("stream_error", sid, errors[sid]))
            elif op == "open":
                _, sid, speaker, cmn = message
                remember = getattr(engine, "remember_cmn", None)
                if speaker is not None and cmn and remember is not None:
                    remember(speaker, cmn)
                try:
                    streams[sid] = engine.open_stream(speaker=speaker)
                except Exception as exc:
                    errors[sid] = f"{type(exc).__name__}: {exc}"
                    conn.send(("stream_error", sid, errors[sid]))
            elif op in ("partial", "finish"):
                _, sid, request_id = message
                if sid in errors:
                    conn.send(("error", request_id, errors[sid]))
                elif sid not in streams:
                    conn.send(("error", request_id, "unknown ASR stream (closed?)"))
                elif op == "partial":
                    conn.send(("ok", request_id, streams[sid].partial()))
                else:
                    text = streams[sid].finish()
                    speaker_cmn = getattr(engine, "speaker_cmn", None)
                    speaker = getattr(streams[sid], "speaker", None)
                    cmn = speaker_cmn(speaker) if speaker_cmn is not None and speaker is not None else None
                    conn.send(("ok", request_id, (text, cmn)))
            elif op == "bias":
                _, sid, phrases, margin = message
                prefer = getattr(streams.get(sid), "bias", None)
                if prefer is not None:
                    prefer(phrases, margin)
            elif op == "close":
                _, sid = message
                errors.pop(sid, None)
                stream = streams.pop(sid, None)
                if stream is not None:
                    stream.close()
        except (EOFError, OSError, BrokenPipeError):
            return
        except Exception as exc:  # never let one bad request end the worker
            if op in ("partial", "finish"):
                conn.send(("error", message[2], f"{type(exc).__name__}: {exc}"))


# ---------------------------------------------------------------- server process side


class _Worker:
    """One worker process, its pipe, the reader thread that hands replies to waiters, and its streams."""

    def __init__(self, engine: ProcessAsrEngine, index: int) -> None:
        self.engine = engine
        self.index = index
        ctx = multiprocessing.get_context(START_METHOD)
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(
            target=_worker_main, args=(child_conn, engine.worker_config), name=f"wren-asr-{index}",
            daemon=True,  # multiprocessing terminates daemonic children when this process exits
        )
        self.process.start()
        child_conn.close()  # only the child holds its end: a dead child means EOF here
        self.pid = self.process.pid
        self.alive = False
        self.streams: weakref.WeakSet[ProcessAsrStream] = weakref.WeakSet()
        # Ids of streams dropped without close(): a finalizer only appends here (no lock, no I/O, since it
        # may run inside another send); the next send tells the worker to release them.
        self.dropped: deque[int] = deque()
        # The outbox: messages in order, written to the pipe by the sender thread (callers never block).
        self._outbox: deque[tuple] = deque()
        self._outbox_ready = threading.Condition()
        self._queued_audio = 0  # bytes of accept() audio in the outbox
        self._gone: str | None = None  # why nothing can be sent any more (pipe broken, stopped)
        self.streams_overflowed = 0
        self._waiters: dict[int, Future] = {}
        self._waiters_lock = threading.Lock()
        self._ready: Future = Future()
        self._reader = threading.Thread(target=self._read, name=f"wren-asr-{index}-reader", daemon=True)
        self._reader.start()
        self._sender = threading.Thread(target=self._write, name=f"wren-asr-{index}-sender", daemon=True)
        self._sender.start()

    def wait_ready(self, timeout: float) -> None:
        try:
            self._ready.result(timeout)
        except FutureTimeout:
            raise AsrError(f"ASR worker {self.index} did not load within {timeout:.0f} s") from None

    @property
    def load(self) -> int:
        return len(self.streams)

    def send(self, message: tuple) -> None:
        """Queue `message` for the worker (never blocks); AsrError if the worker can no longer be reached."""
        with self._outbox_ready:
            if self._gone is not None:
                raise AsrError(f"ASR worker {self.index} (pid {self.pid}) is gone: {self._gone}")
            while self.dropped:
                self._outbox.append(("close", self.dropped.popleft()))
            self._outbox.append(message)
            self._outbox_ready.notify()

    def send_audio(self, sid: int, pcm: bytes) -> None:
        """Queue audio of stream `sid`; AsrError if that would pass the outbox bound (the overflow policy in
        the module docstring): the stream's queued audio is withdrawn and the worker releases the stream."""
        with self._outbox_ready:
            if self._queued_audio + len(pcm) > MAX_QUEUED_AUDIO_BYTES and self._gone is None:
                kept = [m for m in self._outbox if not (m[0] == "accept" and m[1] == sid)]
                self._queued_audio = sum(len(m[2]) for m in kept if m[0] == "accept")
                self._outbox = deque(kept)
                self._outbox.append(("close", sid))
                self._outbox_ready.notify()
                self.streams_overflowed += 1
                raise AsrError(
                    f"ASR worker {self.index} is more than {MAX_QUEUED_AUDIO_S:g} s of audio behind; "
                    "this utterance goes on without words"
                )
            self.send(("accept", sid, pcm))
            self._queued_audio += len(pcm)

    def _write(self) -> None:
        """The sender thread: writes the outbox to the pipe in order (a full pipe blocks only this thread)."""
        while True:
            with self._outbox_ready:
                while not self._outbox and self._gone is None:
                    self._outbox_ready.wait()
                if not self._outbox:
                    return  # gone, nothing left to write
                message = self._outbox.popleft()
                if message[0] == "accept":
                    self._queued_audio -= len(message[2])
            try:
                self.conn.send(message)
            except (OSError, ValueError) as exc:  # BrokenPipeError, or the connection already closed
                self._shut_outbox(str(exc))
                return
            if message[0] == "stop":
                self._shut_outbox("stopped")
                return

    def _shut_outbox(self, why: str) -> None:
        with self._outbox_ready:
            if self._gone is None:
                self._gone = why
            self._outbox.clear()
            self._queued_audio = 0
            self._outbox_ready.notify_all()

    def request(self, op: str, sid: int, timeout: float = REPLY_TIMEOUT_S) -> Any:
        request_id = next(self.engine._ids)
        waiter: Future = Future()
        with self._waiters_lock:
            if not self.alive:
                raise AsrError(f"ASR worker {self.index} (pid {self.pid}) is not running")
            self._waiters[request_id] = waiter
        try:
            self.send((op, sid, request_id))
            return waiter.result(timeout)
        except FutureTimeout:
            raise AsrError(f"ASR worker {self.index} did not answer {op} within {timeout:.0f} s") from None
        finally:
            with self._waiters_lock:
                self._waiters.pop(request_id, None)

    def _read(self) -> None:
        try:
            while True:
                message = self.conn.recv()
                kind = message[0]
                if kind == "ready":
                    self.alive = True
                    self._ready.set_result(None)
                elif kind == "failed":
                    self._ready.set_exception(AsrError(f"ASR worker failed to load: {message[1]}"))
                    return
                elif kind == "stream_error":
                    self._fail_stream(message[1], message[2])
                else:
                    with self._waiters_lock:
                        waiter = self._waiters.pop(message[1], None)
                    if waiter is not None:
                        if kind == "ok":
                            waiter.set_result(message[2])
                        else:
                            waiter.set_exception(AsrError(f"ASR worker: {message[2]}"))
        except (EOFError, OSError):
            pass
        finally:
            self._on_exit()

    def _fail_stream(self, sid: int, reason: str) -> None:
        for stream in list(self.streams):
            if stream.sid == sid:
                stream.fail(AsrError(f"ASR worker: {reason}"))

    def _on_exit(self) -> None:
        with self._waiters_lock:
            self.alive = False
            waiters, self._waiters = list(self._waiters.values()), {}
        self._shut_outbox("the worker process exited")
        self.process.join(5)
        code = self.process.exitcode
        error = AsrError(f"ASR worker {self.index} (pid {self.pid}) exited (code {code}) mid-utterance")
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)
        for stream in list(self.streams):
            stream.fail(error)
        if not self._ready.done():
            self._ready.set_exception(AsrError(f"ASR worker {self.index} exited (code {code}) while loading"))
        self.conn.close()
        self.engine._worker_exited(self, code)

    def stop(self, timeout: float) -> None:
        with contextlib.suppress(AsrError):
            self.send(("stop",))
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout)
        self._shut_outbox("stopped")
        self._reader.join(timeout)
        self._sender.join(timeout)


class ProcessAsrEngine:
    """`load_asr` returns this when `asr.workers > 0`: the configured engine, run in worker processes."""

    sample_rate = 16000

    def __init__(self, config: AsrConfig, workers: int) -> None:
        if workers < 1:
            raise ValueError("ProcessAsrEngine needs at least one worker")
        self.name = config.engine.lower()
        per_worker_pool = max(1, math.ceil(config.pool_size / workers))
        self.worker_config = {**asdict(replace(config, pool_size=per_worker_pool)), "workers": 0}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closing = False
        self._speaker_cmn: OrderedDict[str, str] = OrderedDict()
        self.restarts = 0
        started = time.perf_counter()
        # Filled one by one: a worker that dies while loading reports to `_worker_exited` from its reader
        # thread, possibly before this constructor finishes, so the list must already exist.
        self._workers: list[_Worker] = []
        for i in range(workers):
            self._workers.append(_Worker(self, i))
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
        with self._lock:
            live = [w for w in self._workers if w.alive]
            if self._closing or not live:
                raise AsrError("no ASR worker is running")
            worker = min(live, key=lambda w: w.load)
            stream = ProcessAsrStream(self, worker, next(self._ids), speaker)
            worker.streams.add(stream)  # counted before the next open picks a worker
        cmn = self.speaker_cmn(speaker) if speaker is not None else None
        try:
            worker.send(("open", stream.sid, speaker, cmn))
        except AsrError as exc:
            stream.fail(exc)
            raise
        return stream

    # Per-speaker cepstral means, carried to whichever worker serves the speaker next.
    def speaker_cmn(self, speaker: str) -> str | None:
        with self._lock:
            return self._speaker_cmn.get(speaker)

    def remember_cmn(self, speaker: str, cmn: str) -> None:
        with self._lock:
            self._speaker_cmn[speaker] = cmn
            self._speaker_cmn.move_to_end(speaker)
            while len(self._speaker_cmn) > MAX_REMEMBERED_SPEAKERS:
                self._speaker_cmn.popitem(last=False)

    def _worker_exited(self, worker: _Worker, code: int | None) -> None:
        """Called by a worker's reader thread once its process is gone: replace it unless closing."""
        with self._lock:
            if self._closing or worker not in self._workers or not worker._ready.done():
                return
            if worker._ready.exception() is not None:
                return  # it never loaded: restarting would fail the same way
        log.warning("asr: worker %d (pid %s) exited (code %s); restarting", worker.index, worker.pid, code)
        time.sleep(RESTART_DELAY_S)
        with self._lock:
            if self._closing:
                return
            replacement = _Worker(self, worker.index)
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


class ProcessAsrStream:
    """Proxy of one utterance on a worker. Like every AsrStream: one thread at a time."""

    def __init__(self, engine: ProcessAsrEngine, worker: _Worker, sid: int, speaker: str | None) -> None:
        self._engine = engine
        self._worker = worker
        self.sid = sid
        self.speaker = speaker
        self._error: AsrError | None = None
        self._final: str | None = None
        self._closed = False
        self._dropped = weakref.finalize(self, worker.dropped.append, sid)

    def fail(self, error: AsrError) -> None:
        """The worker died or reported an error: every later call raises it."""
        if self._error is None:
            self._error = error
        self._worker.streams.discard(self)

    def _check(self) -> None:
        if self._closed:
            raise AsrError("ASR stream used after close()")
        if self._error is not None:
            raise self._error

    def accept(self, pcm: bytes) -> None:
        if self._final is not None:
            raise AsrError("ASR stream already finished")
        self._check()
        try:
            self._worker.send_audio(self.sid, bytes(pcm))
        except AsrError as exc:
            self.fail(exc)
            raise

    def bias(self, phrases: tuple[str, ...], margin: float) -> None:
        """Passed on to the stream in the worker (pocketsphinx: n-best matching of the phrase set)."""
        self._check()
        self._worker.send(("bias", self.sid, tuple(phrases), float(margin)))

    def partial(self) -> str:
        if self._final is not None:
            return self._final
        self._check()
        return str(self._worker.request("partial", self.sid))

    def finish(self) -> str:
        """End the utterance and return the final transcript ("" for silence). Idempotent."""
        if self._final is not None:
            return self._final
        self._check()
        text, cmn = self._worker.request("finish", self.sid)
        if self.speaker is not None and cmn:
            self._engine.remember_cmn(self.speaker, cmn)
        self._final = str(text)
        return self._final

    def close(self) -> None:
        """Release the recogniser in the worker. Idempotent; never raises (the worker may be gone)."""
        if self._closed:
            return
        self._closed = True
        self._dropped.detach()
        self._worker.streams.discard(self)
        if self._error is None:
            with contextlib.suppress(AsrError):
                self._worker.send(("close", self.sid))

    def __enter__(self) -> ProcessAsrStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
