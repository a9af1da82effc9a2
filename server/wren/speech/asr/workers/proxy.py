"""`ProcessAsrStream`: one utterance on a worker process, behind the ordinary `AsrStream` contract.

`accept()` queues audio and returns at once (the channel's sender writes it); `partial()`/`finish()` wait
for the worker's reply, which comes after the audio queued before them. `finish()` also brings back the
speaker's cepstral mean, which the server process remembers (`cmn.SpeakerCmnCache`) and carries to
whichever worker serves that speaker next. A worker that dies or reports an error fails the stream: every
later call raises that `AsrError` (the session turns it into an utterance without text).

A stream counts toward its worker's load (and holds its slot under the stream ceiling, `asr.cap`) until
`close()`, failed or not: the worker keeps its recogniser until the `Close` arrives, so the supervisor's
count and the worker's own never disagree.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Protocol

from wren.speech.asr.cap import Slot
from wren.speech.asr.cmn import SpeakerCmnCache
from wren.speech.asr.errors import AsrError
from wren.speech.asr.workers.channel import Bias, Close, Finish, Partial, WorkerChannel


class StreamHost(Protocol):
    """The worker serving a stream, as the proxy sees it (`supervisor.WorkerProcess`)."""

    pid: int | None
    channel: WorkerChannel
    streams: weakref.WeakSet[ProcessAsrStream]  # its open streams: the supervisor's load measure


class ProcessAsrStream:
    """Proxy of one utterance on a worker. Like every AsrStream: one thread at a time."""

    def __init__(
        self, worker: StreamHost, sid: int, speaker: str | None, cmn: SpeakerCmnCache,
        slot: Slot | None = None,
    ) -> None:
        self._worker = worker
        self._cmn = cmn
        self._slot = slot
        if slot is not None:
            slot.held_by(self)
        self.sid = sid
        self.speaker = speaker
        self._error: AsrError | None = None
        self._final: str | None = None
        self._closed = False
        # Dropped without close() (a bug elsewhere): the worker must still release the recogniser.
        self._dropped = weakref.finalize(self, worker.channel.dropped.append, sid)

    @property
    def worker(self) -> StreamHost:
        """The worker process serving this stream (its `pid`, its `channel`): for supervision and tests."""
        return self._worker

    def fail(self, error: AsrError) -> None:
        """The worker died or reported an error: every later call raises it (still counted until close())."""
        if self._error is None:
            self._error = error

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
            self._worker.channel.send_audio(self.sid, bytes(pcm))
        except AsrError as exc:
            self.fail(exc)
            raise

    def bias(self, phrases: tuple[str, ...], margin: float) -> None:
        """Passed on to the stream in the worker (pocketsphinx: n-best matching of the phrase set)."""
        self._check()
        self._worker.channel.send(Bias(self.sid, tuple(phrases), float(margin)))

    def partial(self) -> str:
        if self._final is not None:
            return self._final
        self._check()
        return str(self._worker.channel.request(Partial, self.sid).text)

    def finish(self) -> str:
        """End the utterance and return the final transcript ("" for silence). Idempotent."""
        if self._final is not None:
            return self._final
        self._check()
        reply = self._worker.channel.request(Finish, self.sid)
        if self.speaker is not None and reply.cmn:
            self._cmn.remember(self.speaker, reply.cmn)
        self._final = str(reply.text)
        return self._final

    def close(self) -> None:
        """Release the recogniser in the worker. Idempotent; never raises (the worker may be gone)."""
        if self._closed:
            return
        self._closed = True
        self._dropped.detach()
        # Also after a stream error: the worker holds that recogniser until told. Queued before the stream
        # stops counting, so a stream opened in its place reaches the worker after this Close.
        with contextlib.suppress(AsrError):
            self._worker.channel.send(Close(self.sid))
        self._worker.streams.discard(self)
        if self._slot is not None:
            self._slot.release()

    def __enter__(self) -> ProcessAsrStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
