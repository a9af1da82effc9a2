"""Uplink capture of one utterance: decode → 16 kHz → VAD → (from speech onset) streaming ASR.

The recogniser is told when the speaker pauses (`vad.pause_ms` of silence after speech) and speaks again,
so a whole-utterance recogniser (moonshine) decodes during the pause and little is left at the end.

Every method is blocking CPU work and runs in the listen executor, one call at a time per session
(the session processes its frames sequentially), so nothing here needs locks.

Why the recogniser is opened only at speech onset: ASR recognisers are the expensive per-stream
resource; 200 idle devices (or devices streaming silence) hold none. A pre-roll ring buffer keeps the
audio just before onset (`vad.preroll_ms`, plus the `min_speech_ms` that confirmed it), so the first
syllable reaches the recogniser too (reference §9.1, xinnan PR #338).

The recogniser is opened with `speaker=<device id>`, so pocketsphinx starts from the cepstral mean this
device's previous utterance ended with (its microphone and room), not from another device's.

A recogniser that fails (`AsrError`, e.g. its ASR worker process died) ends only that utterance's words:
VAD and the turn go on, and `finish()` returns no text, so the session takes its normal no-text path.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from wren.config import VadConfig
from wren.session.state import ListenMode
from wren.speech.asr import AsrError
from wren.speech.codec import CodecError
from wren.speech.resample import Resampler

log = logging.getLogger(__name__)

ASR_RATE = 16000
HYSTERESIS = 0.15  # once speaking, a window counts as speech down to threshold - HYSTERESIS


class CaptureEvent(StrEnum):
    ONSET = "onset"  # speech confirmed (realtime: barge-in point)
    END = "end"  # auto/realtime: the silence window elapsed after speech
    MAX_LENGTH = "max_length"  # the utterance reached vad.max_utterance_s
    NO_SPEECH = "no_speech"  # listening for vad.no_speech_timeout_s without any speech


@dataclass(frozen=True)
class CaptureResult:
    heard_speech: bool
    text: str
    audio_ms: int  # uplink audio received for this utterance


class UtteranceCapture:
    def __init__(
        self,
        speech: Any,
        vad_config: VadConfig,
        decoder: Any,
        device_rate: int,
        speaker: str | None = None,
        bias: Callable[[], tuple[tuple[str, ...], float]] | None = None,
    ) -> None:
        self._speech = speech
        self._speaker = speaker  # the device id: per-device ASR adaptation
        self._bias = bias  # (phrases Wren can act on, strength) for recognisers that take a bias
        self._cfg = vad_config
        self._decoder = decoder
        self._device_rate = device_rate
        self._resampler: Resampler | None = None
        self._vad: Any = None
        self._asr: Any = None
        self._preroll: deque[bytes] = deque()
        self._preroll_bytes = 0
        self._preroll_limit = (vad_config.preroll_ms + vad_config.min_speech_ms) * ASR_RATE * 2 // 1000
        self.active = False
        self.mode = ListenMode.AUTO
        self._reset_counters()

    def _reset_counters(self) -> None:
        self.heard_speech = False
        self._audio_ms = 0.0
        self._speech_run_ms = 0.0
        self._silence_run_ms = 0.0
        self._speech_ms = 0.0  # since onset
        self._no_speech_reported = False
        self._ended = False
        self.asr_failed = False  # the recogniser failed during this utterance: no words for it

    # ---- lifecycle ------------------------------------------------------------------------------

    def begin(self, mode: ListenMode) -> None:
        """Start a fresh utterance (every `listen start`/wake `detect` resets the buffers)."""
        self.abandon()
        self.mode = mode
        self._vad = self._speech.vad.new_stream()
        self._resampler = Resampler(self._device_rate, ASR_RATE)
        self.active = True

    def abandon(self) -> None:
        """Drop the utterance in progress and give its VAD context / recogniser back to the pools."""
        if self._asr is not None:
            try:
                self._asr.close()
            except AsrError as exc:  # a recogniser that cannot be released is already gone
                log.warning("releasing the recogniser failed: %s", exc)
            finally:
                self._asr = None
        if self._vad is not None:
            self._vad.close()
            self._vad = None
        self._preroll.clear()
        self._preroll_bytes = 0
        self.active = False
        self._reset_counters()

    def finish(self) -> CaptureResult:
        """Final words of the utterance (near-instant: the audio was decoded while it arrived)."""
        text = ""
        heard = self.heard_speech
        audio_ms = int(self._audio_ms)
        if self._asr is not None:
            try:
                text = self._asr.finish().strip()
            except AsrError as exc:
                log.warning("speech recognition failed at the end of the utterance: %s", exc)
        self.abandon()
        return CaptureResult(heard, text, audio_ms)

    # ---- per frame ------------------------------------------------------------------------------

    def process(self, payload: bytes) -> list[CaptureEvent]:
        """Feed one uplink packet; returns what happened (codec errors propagate to the caller)."""
        if not self.active or self._ended:
            return []
        pcm = self._decoder.decode(payload)
        assert self._resampler is not None and self._vad is not None
        pcm16 = self._resampler.process(pcm)
        if not pcm16:
            return []
        chunk_ms = len(pcm16) / 2 / ASR_RATE * 1000
        self._audio_ms += chunk_ms
        events: list[CaptureEvent] = []
        if self._asr is not None:
            self._accept(pcm16)
        elif not self.heard_speech:
            self._remember(pcm16)
        window_ms = self._vad.window_ms
        for probability in self._vad.process(pcm16):
            events.extend(self._window(probability, window_ms))
        if self.heard_speech:
            self._speech_ms += chunk_ms
            if self._speech_ms >= self._cfg.max_utterance_s * 1000 and not self._ended:
                self._ended = True
                events.append(CaptureEvent.MAX_LENGTH)
        elif (
            not self._no_speech_reported
            and self.mode.ends_by_vad
            and self._audio_ms >= self._cfg.no_speech_timeout_s * 1000
        ):
            self._no_speech_reported = True
            events.append(CaptureEvent.NO_SPEECH)
        return events

    def process_run(self, payloads: Sequence[bytes]) -> list[list[CaptureEvent] | CodecError]:
        """Feed a run of consecutive packets in one call (one executor hand-off for the whole run).

        Returns one outcome per packet consumed: its events, or the CodecError that dropped it. It stops
        right after the first packet that produced events, so the caller acts on them (finalise, barge-in,
        restart) before the rest of the run is fed, exactly as if the packets came one by one."""
        outcomes: list[list[CaptureEvent] | CodecError] = []
        for payload in payloads:
            try:
                events = self.process(payload)
            except CodecError as exc:
                outcomes.append(exc)
                continue
            outcomes.append(events)
            if events:
                break
        return outcomes

    def _window(self, probability: float, window_ms: int) -> list[CaptureEvent]:
        threshold = self._cfg.threshold
        if not self.heard_speech:
            if probability >= threshold:
                self._speech_run_ms += window_ms
                if self._speech_run_ms >= self._cfg.min_speech_ms:
                    self._onset()
                    return [CaptureEvent.ONSET]
            else:
                self._speech_run_ms = 0.0
            return []
        if probability >= threshold - HYSTERESIS:
            if self._silence_run_ms >= self._cfg.pause_ms:
                self._asr_hint("resume")
            self._silence_run_ms = 0.0
            return []
        paused_before = self._silence_run_ms >= self._cfg.pause_ms
        self._silence_run_ms += window_ms
        if not paused_before and self._silence_run_ms >= self._cfg.pause_ms:
            self._asr_hint("pause")
        if self.mode.ends_by_vad and self._silence_run_ms >= self._cfg.silence_ms and not self._ended:
            self._ended = True
            return [CaptureEvent.END]
        return []

    def _remember(self, pcm16: bytes) -> None:
        self._preroll.append(pcm16)
        self._preroll_bytes += len(pcm16)
        while self._preroll and self._preroll_bytes - len(self._preroll[0]) >= self._preroll_limit:
            self._preroll_bytes -= len(self._preroll.popleft())

    def _onset(self) -> None:
        self.heard_speech = True
        try:
            self._asr = self._speech.asr.open_stream(speaker=self._speaker)
            prefer = getattr(self._asr, "bias", None)
            if prefer is not None and self._bias is not None:
                prefer(*self._bias())
        except AsrError as exc:
            self._asr_lost(exc)
        for chunk in self._preroll:  # the audio before and during onset confirmation
            if self._asr is not None:
                self._accept(chunk)
        self._preroll.clear()
        self._preroll_bytes = 0

    def _accept(self, pcm16: bytes) -> None:
        assert self._asr is not None
        try:
            self._asr.accept(pcm16)
        except AsrError as exc:
            self._asr_lost(exc)

    def _asr_hint(self, hint: str) -> None:
        """Tell a whole-utterance recogniser (moonshine) that the speaker paused or spoke again, so it can
        decode speculatively during the pause; streaming recognisers have no such methods."""
        method = getattr(self._asr, hint, None) if self._asr is not None else None
        if method is None:
            return
        try:
            method()
        except AsrError as exc:
            self._asr_lost(exc)

    def _asr_lost(self, exc: AsrError) -> None:
        """Go on without words for this utterance; the next utterance opens a fresh recogniser."""
        log.warning("speech recognition failed mid-utterance (the turn will have no text): %s", exc)
        self.asr_failed = True
        if self._asr is not None:
            with contextlib.suppress(AsrError):
                self._asr.close()
            self._asr = None
