"""The recognition stage: 16 kHz audio and turn-detection frames in, one `Utterance` out at the end.

Why the recogniser is opened only at speech onset: recognisers are the expensive per-stream resource; 200
idle devices (or devices streaming silence) hold none. A pre-roll ring keeps the audio just before onset
(`vad.preroll_ms`, plus the `min_speech_ms` that confirmed it), so the first syllable reaches the
recogniser too (reference §9.1, xinnan PR #338).

It is opened with `speaker=<device id>`, so pocketsphinx starts from the cepstral mean this device's previous
utterance ended with (its microphone and room), and with the session's phrase bias where the engine takes one.
The pause / resume frames are passed to a whole-utterance recogniser (moonshine) as hints, so it decodes
during the pause and little is left at the end. Whether it also drafts while the person speaks depends on how
the utterance ends (`drafts`): only push-to-talk can end it mid-breath.

A recogniser that fails (`AsrError`, e.g. its worker process died) costs only that utterance's words: a
`StageError` frame says so, VAD and the turn go on, and the `Utterance` has no text (the session's normal
no-text path). A recogniser that cannot be opened at all (`AsrUnavailable`: the stream ceiling
`[limits] asr_streams`, or no ASR worker running) goes the same way, and the `Utterance` says so
(`asr_unavailable`), so the session answers "busy" rather than "I didn't catch that". The utterance still
runs to its end (VAD, turn detection): the answer comes when the person stops, not over their words.

A recogniser that can finish without blocking (`finish_later()`, Moonshine) is not waited for here: the
stage puts out a `Transcribing` frame with the decode's future and hands the stream over to it (the stream
closes itself once its words are out), and the session awaits the words (`settle_async`). Blocking here
would hold a listen thread, shared by every session's audio, for as long as the recogniser's queue is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from wren.pipeline.frames import (
    EndOfInput,
    Frame,
    Pcm,
    SpeechOnset,
    SpeechPause,
    SpeechResume,
    StageError,
    Transcribing,
    Utterance,
)
from wren.pipeline.stage import BlockingStage
from wren.speech.asr.errors import AsrError, AsrUnavailable

log = logging.getLogger(__name__)

Bias = Callable[[], tuple[tuple[str, ...], float]]  # (phrases Wren can act on, strength)
WORDS_TIMEOUT_S = 60.0  # a recogniser that has not finished by then has failed this utterance


class RecogniseStage(BlockingStage):
    name = "recognise"

    def __init__(
        self, asr: Any, preroll_bytes: int, speaker: str | None = None, bias: Bias | None = None,
        drafts: bool = True,
    ) -> None:
        self._engine = asr  # an AsrEngine: open_stream(speaker) → AsrStream
        self._speaker = speaker
        self._bias = bias
        self._drafts = drafts  # guess while speaking (a whole-utterance recogniser's `drafts` hint)
        self._stream: Any = None
        self._heard = False
        self._unavailable = False  # this utterance's recogniser was refused (AsrUnavailable)
        # Overflow policy: drop the oldest audio (only the last `preroll_bytes` matter before onset).
        self._preroll: deque[bytes] = deque()
        self._preroll_size = 0
        self._preroll_limit = preroll_bytes

    def process(self, frame: Frame) -> Iterable[Frame]:
        if isinstance(frame, Pcm):
            if self._stream is not None:
                return self._guard(self._stream.accept, frame.pcm)
            if not self._heard:
                self._remember(frame.pcm)
            return ()
        if isinstance(frame, SpeechOnset):
            return (frame, *self._open())
        if isinstance(frame, SpeechPause | SpeechResume):
            hint = getattr(self._stream, "pause" if isinstance(frame, SpeechPause) else "resume", None)
            return self._guard(hint) if hint is not None else ()
        if isinstance(frame, EndOfInput):
            return self._finish(frame)
        return (frame,)

    def close(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            try:
                stream.close()
            except AsrError as exc:  # a recogniser that cannot be released is already gone
                log.warning("releasing the recogniser failed: %s", exc)
        self._preroll.clear()

    def _remember(self, pcm: bytes) -> None:
        preroll, limit = self._preroll, self._preroll_limit
        preroll.append(pcm)
        size = self._preroll_size + len(pcm)
        while preroll and size - len(preroll[0]) >= limit:
            size -= len(preroll.popleft())
        self._preroll_size = size

    def _open(self) -> list[Frame]:
        self._heard = True
        out: list[Frame] = []
        try:
            self._stream = self._engine.open_stream(speaker=self._speaker)
            prefer = getattr(self._stream, "bias", None)
            if prefer is not None and self._bias is not None:
                prefer(*self._bias())
            drafts = getattr(self._stream, "drafts", None)
            if drafts is not None:
                drafts(self._drafts)
        except AsrError as exc:
            out.extend(self._lost(exc))
        for chunk in self._preroll:  # the audio before and during onset confirmation
            if self._stream is not None:
                out.extend(self._guard(self._stream.accept, chunk))
        self._preroll.clear()
        self._preroll_size = 0
        return out

    def _finish(self, end: EndOfInput) -> list[Frame]:
        text = ""
        out: list[Frame] = []
        later = getattr(self._stream, "finish_later", None)
        if later is not None:
            return [self._transcribing(later, end)]
        if self._stream is not None:
            try:
                text = self._stream.finish().strip()
            except AsrError as exc:
                log.warning("speech recognition failed at the end of the utterance: %s", exc)
                out.append(StageError(self.name, exc))
        self.close()
        out.append(Utterance(text, end.heard_speech, end.audio_ms, end.reason, end.at, time.monotonic(),
                             asr_unavailable=self._unavailable))
        return out

    def _transcribing(self, finish_later: Callable[[], concurrent.futures.Future], end: EndOfInput) -> Frame:
        stream, self._stream = self._stream, None  # the frame owns it now: close() must not cancel the decode
        try:
            words = finish_later()
        except AsrError as exc:
            words = concurrent.futures.Future()
            words.set_exception(exc)
        words.add_done_callback(lambda _: _close_quietly(stream))
        self.close()
        return Transcribing(words, end.heard_speech, end.audio_ms, end.reason, end.at,
                            asr_unavailable=self._unavailable)

    def _guard(self, call: Callable[..., Any], *args: Any) -> list[Frame]:
        try:
            call(*args)
        except AsrError as exc:
            return self._lost(exc)
        return []

    def _lost(self, exc: AsrError) -> list[Frame]:
        """Go on without words for this utterance; the next utterance opens a fresh recogniser."""
        if isinstance(exc, AsrUnavailable):  # a bound, not a fault: the cap logs it, once a minute
            self._unavailable = True
            log.debug("no recogniser for this utterance: %s", exc)
        else:
            log.warning("speech recognition failed mid-utterance (the turn will have no text): %s", exc)
        if self._stream is not None:
            with contextlib.suppress(AsrError):
                self._stream.close()
            self._stream = None
        return [StageError(self.name, exc)]


def _close_quietly(stream: Any) -> None:
    try:
        stream.close()
    except AsrError as exc:
        log.warning("releasing the recogniser failed: %s", exc)


def _settled(pending: Transcribing, error: Exception | None = None) -> list[Frame]:
    """The `Utterance` of words that are out, or a `StageError` and an empty one if they never came."""
    if error is None:
        return [pending.utterance(str(pending.words.result()).strip(), time.monotonic())]
    log.warning("speech recognition failed at the end of the utterance: %s", error)
    failure = error if isinstance(error, AsrError) else AsrError(f"the recogniser failed: {error!r}")
    return [StageError(RecogniseStage.name, failure), pending.utterance("", time.monotonic())]


def settle(pending: Transcribing, timeout: float = WORDS_TIMEOUT_S) -> list[Frame]:
    """Wait for the words (blocking): the `Utterance`, after a `StageError` if the recogniser failed."""
    try:
        pending.words.result(timeout)
    except concurrent.futures.TimeoutError:
        return _settled(pending, AsrError(f"no words within {timeout:.0f} s"))
    except Exception as exc:
        return _settled(pending, exc)
    return _settled(pending)


async def settle_async(pending: Transcribing, timeout: float = WORDS_TIMEOUT_S) -> list[Frame]:
    """`settle` on the event loop: other sessions go on while this one waits for its words."""
    try:
        # On a timeout (or the session's cancel) the wrapper cancels the decode's future too.
        await asyncio.wait_for(asyncio.wrap_future(pending.words), timeout)
    except TimeoutError:
        return _settled(pending, AsrError(f"no words within {timeout:.0f} s"))
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the session is closing
        # The decode itself was cancelled (the engine is closing): this utterance has no words.
        return _settled(pending, AsrError("the recogniser's decode was cancelled"))
    except Exception as exc:
        return _settled(pending, exc)
    return _settled(pending)
