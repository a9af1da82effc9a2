"""Turn detection: where speech begins, pauses and ends, per listen mode (reference §5.1).

`TurnDetector` is the uplink stage after the VAD. For every chunk it passes the audio on first, then what
the chunk meant: `SpeechOnset` once `vad.min_speech_ms` of speech is confirmed, `SpeechPause` /
`SpeechResume` around `vad.pause_ms` of silence (a whole-utterance recogniser decodes in the pause), and
`EndOfInput` when the utterance is over:
- auto and realtime: `vad.silence_ms` of silence after speech (`InputEnd.SILENCE`), or listening for
  `vad.no_speech_timeout_s` without any speech (`NO_SPEECH`);
- every mode: `vad.max_utterance_s` of speech (`MAX_LENGTH`);
- manual: only the device's `listen stop`, which the session pushes in as `EndOfInput(LISTEN_STOP)`.
An `EndOfInput` coming through (from the session) gets this detector's counts (speech heard, audio ms)
filled in. After the end the detector passes nothing more: the utterance is over.

Speech uses hysteresis: once speaking, a window counts as speech down to `threshold - HYSTERESIS`.

Push-to-talk pauses by level too. Silero's probability trails the last word by 60-120 ms (its state
remembers the speech), and with `pause_ms` on top and 60 ms packets the pause came 120-180 ms after the
word: about when the button comes up, so the recogniser's guess started with the person already waiting.
In manual mode, once speech was heard, a chunk within `vad.quiet_margin_db` of the room's noise floor (the
VAD stream's `room`) is a pause at once, and only a louder chunk can be speech again. On the 24 bench
sentences at 30 dB SNR that moves the pause to 0-60 ms after the last word (from 120-180), at the price of
about one false pause every two utterances (a quiet consonant): a guess that is dropped at the resume,
whose tokens still serve as the next decode's draft. Auto and realtime modes leave it to the VAD: their
end is `silence_ms` away, so the guess has time, and at many devices every extra guess is CPU.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from enum import StrEnum

import numpy as np

from shared_protocol.constants import MODE_AUTO, MODE_MANUAL, MODE_REALTIME
from wren.config import VadConfig
from wren.pipeline.frames import (
    EndOfInput,
    Frame,
    InputEnd,
    SpeechOnset,
    SpeechPause,
    SpeechResume,
    VoiceActivity,
)
from wren.pipeline.stage import BlockingStage
from wren.speech.vad_windows import NoiseFloor

HYSTERESIS = 0.15


class ListenMode(StrEnum):
    AUTO = MODE_AUTO  # server VAD ends the utterance
    MANUAL = MODE_MANUAL  # `listen start` / `listen stop` bound it (push-to-talk)
    REALTIME = MODE_REALTIME  # like auto, but the mic keeps streaming while speaking: speech barges in

    @property
    def ends_by_vad(self) -> bool:
        return self is not ListenMode.MANUAL


class TurnDetector(BlockingStage):
    name = "turn-detection"

    def __init__(self, config: VadConfig, mode: ListenMode, room: NoiseFloor | None = None) -> None:
        """`room`: the VAD stream's noise floor (None for a VAD without one), for pauses by level."""
        self._cfg = config
        self.mode = mode
        by_level = mode is ListenMode.MANUAL and room is not None and config.quiet_margin_db > 0
        self._room = room if by_level else None
        self._quiet_factor = 10 ** (config.quiet_margin_db / 10)
        self.heard_speech = False
        self.audio_ms = 0.0
        self._speech_run_ms = 0.0
        self._silence_run_ms = 0.0
        self._speech_ms = 0.0  # since onset
        self._no_speech_reported = False
        self.ended = False

    def process(self, frame: Frame) -> Iterable[Frame]:
        if self.ended:
            return ()
        if isinstance(frame, EndOfInput):
            self.ended = True
            return (dataclasses.replace(frame, heard_speech=self.heard_speech, audio_ms=int(self.audio_ms)),)
        if not isinstance(frame, VoiceActivity):
            return (frame,)
        out: list[Frame] = [frame.audio]
        chunk_ms = frame.audio.duration_ms
        self.audio_ms += chunk_ms
        if self.heard_speech and self._at_room_level(frame.audio.pcm):
            self._quiet(chunk_ms, out)
        elif not self.heard_speech and max(frame.probabilities, default=1.0) < self._cfg.threshold:
            self._speech_run_ms = 0.0  # what `_window` does with each of them (the common case, in one step)
        else:
            for probability in frame.probabilities:
                self._window(probability, frame.window_ms, out)
                if self.ended:
                    return out
        if self.heard_speech:
            self._speech_ms += chunk_ms
            if self._speech_ms >= self._cfg.max_utterance_s * 1000:
                self._end(InputEnd.MAX_LENGTH, out)
        elif (
            not self._no_speech_reported
            and self.mode.ends_by_vad
            and self.audio_ms >= self._cfg.no_speech_timeout_s * 1000
        ):
            self._no_speech_reported = True
            self._end(InputEnd.NO_SPEECH, out)
        return out

    def _end(self, reason: InputEnd, out: list[Frame]) -> None:
        self.ended = True
        out.append(EndOfInput(reason, time.monotonic(), self.heard_speech, int(self.audio_ms)))

    def _at_room_level(self, pcm: bytes) -> bool:
        if self._room is None or len(pcm) < 2:
            return False
        floor = self._room.mean_square
        if floor is None:
            return False
        samples = np.frombuffer(pcm, dtype="<i2", count=len(pcm) // 2).astype(np.float32) / np.float32(32768)
        return float(np.dot(samples, samples)) / len(samples) < floor * self._quiet_factor

    def _quiet(self, chunk_ms: float, out: list[Frame]) -> None:
        """A chunk at the room's level after speech (push-to-talk): a pause now, whatever the VAD says."""
        if self._silence_run_ms < self._cfg.pause_ms:
            out.append(SpeechPause())
        self._silence_run_ms = max(self._silence_run_ms + chunk_ms, self._cfg.pause_ms)

    def _window(self, probability: float, window_ms: int, out: list[Frame]) -> None:
        threshold = self._cfg.threshold
        if not self.heard_speech:
            if probability >= threshold:
                self._speech_run_ms += window_ms
                if self._speech_run_ms >= self._cfg.min_speech_ms:
                    self.heard_speech = True
                    out.append(SpeechOnset())
            else:
                self._speech_run_ms = 0.0
            return
        if probability >= threshold - HYSTERESIS:
            if self._silence_run_ms >= self._cfg.pause_ms:
                out.append(SpeechResume())
            self._silence_run_ms = 0.0
            return
        paused_before = self._silence_run_ms >= self._cfg.pause_ms
        self._silence_run_ms += window_ms
        if not paused_before and self._silence_run_ms >= self._cfg.pause_ms:
            out.append(SpeechPause())
        if self.mode.ends_by_vad and self._silence_run_ms >= self._cfg.silence_ms:
            self._end(InputEnd.SILENCE, out)
