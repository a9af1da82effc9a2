"""The pipe protocol between the server and one ASR worker process, and the two threads that carry it.

Messages are small named tuples, pickled by multiprocessing. To the worker: `Open`, `Accept`, `Bias`,
`Partial`, `Finish`, `Close`, `Stop`; it handles them one at a time, in arrival order (so a request queued
behind a stream's audio is answered after that audio is decoded). From the worker: `Ready` or `LoadFailed`
once, then `StreamError` (a stream failed in the worker), `Reply` / `RequestFailed` (to a `Partial` or
`Finish`, matched by request id).

Every message to a worker goes through its outbox, which one sender thread writes to the pipe in order,
so `send()` never blocks the caller: no round trip per audio frame, and no waiting on a full 64 KB pipe
(that stalled the server's listen thread, and with it the uplink of every other device). A full pipe
blocks only the sender thread. `request()` queues a request with an id and waits for the reply, which the
reader thread hands over.

Overflow policy of the outbox (a worker hopelessly behind, e.g. a box far past its capacity): audio
queued for one worker is bounded to `MAX_QUEUED_AUDIO_S` seconds. The `send_audio()` that would pass the
bound fails its own stream with `AsrError` (loudly, never a silent gap in the words: the session ends that
utterance as a turn without text, the normal empty-input path), that stream's queued audio is withdrawn
and the worker is told to release it, so the worker catches up for the other streams. Control messages
are never refused: they are bounded by the open streams (an open, a bias, a close each, and at most one
request at a time, since its caller waits for the reply). The other way, the worker's `send()` blocks on
a full pipe (policy: block the producer) only until the reader thread, which waits on nothing else, catches
up; the replies are small.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing.connection import Connection
from typing import NamedTuple, Protocol

from wren.speech.asr.errors import AsrError

REPLY_TIMEOUT_S = 60.0  # partial()/finish() of one utterance; a live worker answers in milliseconds
# Audio waiting in one worker's outbox beyond which the stream that adds more fails (policy: fail the
# stream, see above). A worker keeps up with ≈5 speakers at once (RTF ≈0.2 each), so 20 s of audio queued
# means it is seconds behind real time: that utterance's words would come far too late to be useful.
MAX_QUEUED_AUDIO_S = 20.0
MAX_QUEUED_AUDIO_BYTES = int(MAX_QUEUED_AUDIO_S * 16000 * 2)


# ---------------------------------------------------------------- to the worker


class Open(NamedTuple):
    sid: int
    speaker: str | None
    cmn: str | None  # the speaker's cepstral mean, remembered in the server process (see cmn.py)


class Accept(NamedTuple):
    sid: int
    pcm: bytes


class Bias(NamedTuple):
    sid: int
    phrases: tuple[str, ...]
    margin: float


class Partial(NamedTuple):
    sid: int
    request_id: int


class Finish(NamedTuple):
    sid: int
    request_id: int


class Close(NamedTuple):
    sid: int


class Stop(NamedTuple):
    """The worker exits; the sender writes nothing after it."""


ToWorker = Open | Accept | Bias | Partial | Finish | Close | Stop
Request = Partial | Finish


# ---------------------------------------------------------------- from the worker


class Ready(NamedTuple):
    pid: int


class LoadFailed(NamedTuple):
    """The engine did not load; the last message (the worker then exits)."""

    reason: str


class StreamError(NamedTuple):
    """A stream failed in the worker; its later requests are answered with `RequestFailed`."""

    sid: int
    reason: str


class Reply(NamedTuple):
    request_id: int
    text: str
    cmn: str | None = None  # Finish only: the speaker's cepstral mean at the end of the utterance


class RequestFailed(NamedTuple):
    request_id: int
    reason: str


FromWorker = Ready | LoadFailed | StreamError | Reply | RequestFailed


def describe(exc: BaseException) -> str:
    """An exception as one line for the other process (the exception object itself may not pickle)."""
    return f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------- the server's end


class ChannelEvents(Protocol):
    """What the reader thread reports to the channel's owner (`supervisor.WorkerProcess`)."""

    def on_ready(self, pid: int) -> None: ...

    def on_load_failed(self, reason: str) -> None: ...

    def on_stream_error(self, sid: int, reason: str) -> None: ...

    def on_closed(self) -> None: ...  # the pipe ended: the worker exited (or will: after LoadFailed)


class WorkerChannel:
    """The server's end of one worker's pipe: the outbox and its sender thread, the reader thread, and
    the requests waiting for a reply."""

    def __init__(self, conn: Connection, index: int, pid: int | None, events: ChannelEvents) -> None:
        self.conn = conn
        self.index = index
        self.pid = pid
        self._events = events
        self.alive = False  # the worker has loaded and answers requests (False again once it is gone)
        # Ids of streams dropped without close(): a finalizer only appends here (no lock, no I/O, since it
        # may run inside another send); the next send tells the worker to release them. Bound: at most one
        # id per stream open on this worker (a stream is dropped once; its open drained the ones before).
        self.dropped: deque[int] = deque()
        # The outbox: messages in order, written to the pipe by the sender thread (callers never block).
        # Bound: MAX_QUEUED_AUDIO_BYTES of audio (policy: fail the stream, in send_audio); control
        # messages are bounded by the open streams (module docstring).
        self._outbox: deque[ToWorker] = deque()
        self._outbox_ready = threading.Condition()
        self._queued_audio = 0  # bytes of Accept audio in the outbox
        self._gone: str | None = None  # why nothing can be sent any more (pipe broken, stopped)
        self.streams_overflowed = 0
        self._request_ids = itertools.count(1)
        # One per caller blocked in request() (never more than the threads using streams of this worker).
        self._waiters: dict[int, Future[Reply]] = {}
        self._waiters_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"wren-asr-{index}-reader", daemon=True)
        self._sender = threading.Thread(target=self._write, name=f"wren-asr-{index}-sender", daemon=True)

    def start(self) -> None:
        """Start both threads (once the owner is ready for events: the reader may report at once)."""
        self._reader.start()
        self._sender.start()

    # ---- sending

    def send(self, message: ToWorker) -> None:
        """Queue `message` for the worker (never blocks); AsrError if the worker can no longer be reached."""
        with self._outbox_ready:
            if self._gone is not None:
                raise AsrError(f"ASR worker {self.index} (pid {self.pid}) is gone: {self._gone}")
            while self.dropped:
                self._outbox.append(Close(self.dropped.popleft()))
            self._outbox.append(message)
            self._outbox_ready.notify()

    def send_audio(self, sid: int, pcm: bytes) -> None:
        """Queue audio of stream `sid`; AsrError if that would pass the outbox bound (the overflow policy in
        the module docstring): the stream's queued audio is withdrawn and the worker releases the stream."""
        with self._outbox_ready:
            if self._queued_audio + len(pcm) > MAX_QUEUED_AUDIO_BYTES and self._gone is None:
                kept = [m for m in self._outbox if not (isinstance(m, Accept) and m.sid == sid)]
                self._queued_audio = sum(len(m.pcm) for m in kept if isinstance(m, Accept))
                self._outbox = deque(kept)  # the same outbox, minus this stream: same bound
                self._outbox.append(Close(sid))
                self._outbox_ready.notify()
                self.streams_overflowed += 1
                raise AsrError(
                    f"ASR worker {self.index} is more than {MAX_QUEUED_AUDIO_S:g} s of audio behind; "
                    "this utterance goes on without words"
                )
            self.send(Accept(sid, pcm))  # the Condition's lock is reentrant
            self._queued_audio += len(pcm)

    def request(
        self, kind: type[Partial] | type[Finish], sid: int, timeout: float = REPLY_TIMEOUT_S
    ) -> Reply:
        """Queue a `Partial` or `Finish` for stream `sid` (behind its audio) and wait for the reply."""
        request_id = next(self._request_ids)
        waiter: Future[Reply] = Future()
        with self._waiters_lock:
            if not self.alive:
                raise AsrError(f"ASR worker {self.index} (pid {self.pid}) is not running")
            self._waiters[request_id] = waiter
        try:
            self.send(kind(sid, request_id))
            return waiter.result(timeout)
        except FutureTimeout:
            name = kind.__name__.lower()
            raise AsrError(f"ASR worker {self.index} did not answer {name} within {timeout:.0f} s") from None
        finally:
            with self._waiters_lock:
                self._waiters.pop(request_id, None)

    def _write(self) -> None:
        """The sender thread: writes the outbox to the pipe in order (a full pipe blocks only this thread)."""
        while True:
            with self._outbox_ready:
                while not self._outbox and self._gone is None:
                    self._outbox_ready.wait()
                if not self._outbox:
                    return  # gone, nothing left to write
                message = self._outbox.popleft()
                if isinstance(message, Accept):
                    self._queued_audio -= len(message.pcm)
            try:
                self.conn.send(message)
            except (OSError, ValueError) as exc:  # BrokenPipeError, or the connection already closed
                self.shut(str(exc))
                return
            if isinstance(message, Stop):
                self.shut("stopped")
                return

    def shut(self, why: str) -> None:
        """Nothing more is sent (queued messages are discarded); later sends raise AsrError with `why`."""
        with self._outbox_ready:
            if self._gone is None:
                self._gone = why
            self._outbox.clear()
            self._queued_audio = 0
            self._outbox_ready.notify_all()

    # ---- receiving

    def _read(self) -> None:
        """The reader thread: hands replies to their waiters and everything else to the owner."""
        try:
            while True:
                message: FromWorker = self.conn.recv()
                match message:
                    case Ready(pid):
                        self.alive = True
                        self._events.on_ready(pid)
                    case LoadFailed(reason):
                        self._events.on_load_failed(reason)
                        return
                    case StreamError(sid, reason):
                        self._events.on_stream_error(sid, reason)
                    case Reply(request_id):
                        if (waiter := self._take_waiter(request_id)) is not None:
                            waiter.set_result(message)
                    case RequestFailed(request_id, reason):
                        if (waiter := self._take_waiter(request_id)) is not None:
                            waiter.set_exception(AsrError(f"ASR worker: {reason}"))
        except (EOFError, OSError):
            pass
        finally:
            self._events.on_closed()

    def _take_waiter(self, request_id: int) -> Future[Reply] | None:
        """The waiter of a reply (None: its caller timed out and left)."""
        with self._waiters_lock:
            return self._waiters.pop(request_id, None)

    def end_requests(self) -> list[Future[Reply]]:
        """The worker is gone: refuse new requests and return the waiting ones, for the owner to fail."""
        with self._waiters_lock:
            self.alive = False
            waiters, self._waiters = list(self._waiters.values()), {}
        return waiters

    def close_connection(self) -> None:
        self.conn.close()

    def join(self, timeout: float) -> None:
        self._reader.join(timeout)
        self._sender.join(timeout)
