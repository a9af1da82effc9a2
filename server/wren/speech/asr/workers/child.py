"""The ASR worker process: load the real engine once, then serve the pipe until it closes.

Why a process at all: pocketsphinx's Python binding holds the GIL while it decodes, so in the server
process two ASR threads ran slower than one and every call stalled the event loop (up to ≈60 ms); with 20
people speaking at once uplink handling fell ≈16 s behind on a 2-core box. A worker process has its own GIL.

The worker loads the configured engine in-process (`workers = 0`) with its own warm pool, then handles the
`channel` messages one at a time in arrival order. It never dies of one bad request: a failing stream is
reported (`StreamError`) and answers its later requests with the error. It exits on `Stop` or when the
pipe closes, so it never outlives the server, however that ends.
"""

from __future__ import annotations

import os
import signal
from multiprocessing.connection import Connection
from typing import Any

from wren.config import AsrConfig
from wren.speech.asr.base import AsrEngine, AsrStream
from wren.speech.asr.local import load_in_process
from wren.speech.asr.workers.channel import (
    Accept,
    Bias,
    Close,
    Finish,
    LoadFailed,
    Open,
    Partial,
    Ready,
    Reply,
    RequestFailed,
    Stop,
    StreamError,
    ToWorker,
    describe,
)


def main(conn: Connection, config_fields: dict[str, Any], max_streams: int = 0) -> None:
    """Entry point of a worker process (spawned: `config_fields` is the AsrConfig as a dict). `max_streams`:
    this worker's share of the stream ceiling (0 = none); its engine refuses streams past it, so it never
    holds more recognisers than that in use, whatever the server process asks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the parent decides
    try:
        engine = load_in_process(AsrConfig(**{**config_fields, "workers": 0}), max_streams)
    except Exception as exc:  # report any load failure to the parent instead of dying silently
        conn.send(LoadFailed(describe(exc)))
        return
    conn.send(Ready(os.getpid()))
    worker = _Worker(conn, engine)
    while True:
        try:
            message: ToWorker = conn.recv()
        except (EOFError, OSError):
            return  # the server went away
        if isinstance(message, Stop):
            return
        try:
            worker.handle(message)
        except (EOFError, OSError, BrokenPipeError):
            return
        except Exception as exc:  # never let one bad request end the worker
            if isinstance(message, Partial | Finish):
                conn.send(RequestFailed(message.request_id, describe(exc)))


class _Worker:
    """The streams open in this worker. Not a queue: one entry per open stream, removed by its Close."""

    def __init__(self, conn: Connection, engine: AsrEngine) -> None:
        self.conn = conn
        self.engine = engine
        self.streams: dict[int, AsrStream] = {}
        self.errors: dict[int, str] = {}  # a stream whose accept() failed answers its next request with it

    def handle(self, message: ToWorker) -> None:
        match message:
            case Accept(sid, pcm):
                if sid in self.streams and sid not in self.errors:
                    try:
                        self.streams[sid].accept(pcm)
                    except Exception as exc:
                        self._fail(sid, exc)
            case Open(sid, speaker, cmn):
                remember = getattr(self.engine, "remember_cmn", None)
                if speaker is not None and cmn and remember is not None:
                    remember(speaker, cmn)
                try:
                    self.streams[sid] = self.engine.open_stream(speaker=speaker)
                except Exception as exc:
                    self._fail(sid, exc)
            case Partial(sid, request_id) | Finish(sid, request_id):
                self._answer(message, sid, request_id)
            case Bias(sid, phrases, margin):
                prefer = getattr(self.streams.get(sid), "bias", None)
                if prefer is not None:
                    prefer(phrases, margin)
            case Close(sid):
                self.errors.pop(sid, None)
                stream = self.streams.pop(sid, None)
                if stream is not None:
                    stream.close()

    def _fail(self, sid: int, exc: Exception) -> None:
        self.errors[sid] = describe(exc)
        self.conn.send(StreamError(sid, self.errors[sid]))

    def _answer(self, request: Partial | Finish, sid: int, request_id: int) -> None:
        if sid in self.errors:
            self.conn.send(RequestFailed(request_id, self.errors[sid]))
        elif sid not in self.streams:
            self.conn.send(RequestFailed(request_id, "unknown ASR stream (closed?)"))
        elif isinstance(request, Partial):
            self.conn.send(Reply(request_id, self.streams[sid].partial()))
        else:
            text = self.streams[sid].finish()
            # The speaker's mean goes back with the words: the server carries it to the next worker.
            speaker_cmn = getattr(self.engine, "speaker_cmn", None)
            speaker = getattr(self.streams[sid], "speaker", None)
            cmn = speaker_cmn(speaker) if speaker_cmn is not None and speaker is not None else None
            self.conn.send(Reply(request_id, text, cmn))
