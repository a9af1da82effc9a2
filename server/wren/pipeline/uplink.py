"""The uplink of one utterance: decode → resample to 16 kHz → VAD → turn detection → recognition.

`Uplink` is built at every `listen start` (or wake word) and closed when the utterance is over or
abandoned: a new utterance never inherits a VAD context, a resampler tail or a recogniser from the last.

Everything here is blocking CPU work and runs in the listen executor, one call at a time per session (the
session handles its frames strictly in order), so nothing needs locks. `feed_run` takes a run of
consecutive packets in one executor job, and stops right after the first packet that produced a turn
event, so the session acts on it (barge-in, the end of the utterance) before the packets after it are fed,
exactly as if they came one by one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from wren.config import VadConfig
from wren.pipeline.frames import (
    EndOfInput,
    Frame,
    InputEnd,
    Pcm,
    SpeechOnset,
    StageError,
    Transcribing,
    UplinkPacket,
    Utterance,
    VoiceActivity,
)
from wren.pipeline.recognise import Bias, RecogniseStage, settle
from wren.pipeline.stage import BlockingStage, Chain
from wren.pipeline.turn_detection import ListenMode, TurnDetector
from wren.speech.codec import CodecError
from wren.speech.resample import Resampler
from wren.speech.vad import SileroVadStream, plan_together, score_together

ASR_RATE = 16000


class DecodeStage(BlockingStage):
    """Device packets (Opus or PCM) → PCM at the device's rate; a corrupt packet becomes a StageError."""

    name = "decode"

    def __init__(self, decoder: Any, rate: int) -> None:
        self._decoder = decoder
        self._rate = rate

    def process(self, frame: Frame) -> Iterable[Frame]:
        if not isinstance(frame, UplinkPacket):
            return (frame,)
        try:
            return (Pcm(self._decoder.decode(frame.payload), self._rate),)
        except CodecError as exc:
            return (StageError(self.name, exc),)


class ResampleStage(BlockingStage):
    name = "resample"

    def __init__(self, from_rate: int, to_rate: int = ASR_RATE) -> None:
        self._resampler = Resampler(from_rate, to_rate)
        self._to = to_rate

    def process(self, frame: Frame) -> Iterable[Frame]:
        if not isinstance(frame, Pcm):
            return (frame,)
        pcm = self._resampler.process(frame.pcm)
        return (Pcm(pcm, self._to),) if pcm else ()


class VadStage(BlockingStage):
    """16 kHz chunks → `VoiceActivity`: the chunk with the probability of each VAD window it completed."""

    name = "vad"

    def __init__(self, vad_stream: Any) -> None:
        self._vad = vad_stream  # a VadStream: one per utterance (its context), closed with the stage

    def process(self, frame: Frame) -> Iterable[Frame]:
        if not isinstance(frame, Pcm):
            return (frame,)
        return (VoiceActivity(frame, tuple(self._vad.process(frame.pcm)), self._vad.window_ms),)

    def close(self) -> None:
        self._vad.close()

    @staticmethod
    def process_together(work: Sequence[tuple[VadStage, Pcm]]) -> list[VoiceActivity]:
        """`process` for the chunks of many stages (streams) at once: Silero streams share one energy
        computation (`wren.speech.vad.plan_together`) and one model call per window (`score_together`),
        the others score alone."""
        planned = [i for i, (stage, _) in enumerate(work) if isinstance(stage._vad, SileroVadStream)]
        plans = plan_together([(work[i][0]._vad, work[i][1].pcm) for i in planned])
        scores = dict(zip(planned, score_together(plans), strict=True))
        return [
            VoiceActivity(pcm, tuple(scores[i] if i in scores else stage._vad.process(pcm.pcm)),
                          stage._vad.window_ms)
            for i, (stage, pcm) in enumerate(work)
        ]


def _is_turn_event(frame: Frame) -> bool:
    return isinstance(frame, SpeechOnset | Utterance | Transcribing)


class Uplink:
    """One utterance's stages, joined; the session's only handle on uplink audio processing."""

    def __init__(
        self,
        speech: Any,
        vad_config: VadConfig,
        decoder: Any,
        device_rate: int,
        mode: ListenMode,
        speaker: str | None = None,
        bias: Bias | None = None,
        room: Any = None,
    ) -> None:
        """`room`: the last utterance's `Uplink.room` (the VAD's noise floor), so this one goes on from it."""
        self.mode = mode
        preroll = (vad_config.preroll_ms + vad_config.min_speech_ms) * ASR_RATE * 2 // 1000
        # In three parts, so that `feed_together` can run the VAD of many uplinks in one model call.
        front: list[BlockingStage] = [DecodeStage(decoder, device_rate)]
        if device_rate != ASR_RATE:  # a 16 kHz device (every official one) needs no stage, no copy per frame
            front.append(ResampleStage(device_rate))
        self._front = Chain(front)
        self._vad = VadStage(speech.vad.new_stream(room))
        self.detector = TurnDetector(vad_config, mode, room=self.room)
        self._back = Chain([
            self.detector,
            # A VAD-ended turn gives the guess at the pause `silence_ms` to finish: no drafts needed.
            RecogniseStage(speech.asr, preroll, speaker, bias, drafts=not mode.ends_by_vad),
        ])
        self._chain = Chain([*self._front.stages, self._vad, *self._back.stages])
        self._closed = False

    @property
    def room(self) -> Any:
        """The VAD stream's noise floor, for the device's next utterance (None for a VAD without one)."""
        return getattr(self._vad._vad, "room", None)

    @property
    def heard_speech(self) -> bool:
        return self.detector.heard_speech

    @property
    def ended(self) -> bool:
        return self.detector.ended

    def feed_run(self, payloads: Sequence[bytes]) -> list[list[Frame]]:
        """Frames out for each packet consumed (its turn events and StageErrors), in order. Stops after the
        first packet whose frames include a turn event (`SpeechOnset`, `Utterance`)."""
        outcome = feed_together([(self, payloads)])[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def end(self, reason: InputEnd = InputEnd.LISTEN_STOP) -> list[Frame]:
        """The utterance is over (`listen stop`): its `Utterance` (and any StageError), near-instantly,
        since the audio was recognised while it arrived; or `Transcribing`, if the recogniser is still at
        it (`wren.pipeline.recognise`)."""
        return self._chain.push(EndOfInput(reason, time.monotonic()))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._chain.close()


Outcomes = list[list[Frame]]  # per packet consumed, its frames


def feed_together(runs: Sequence[tuple[Uplink, Sequence[bytes]]]) -> list[Outcomes | BaseException]:
    """`Uplink.feed_run` for the runs of many uplinks (different sessions) at once, packet by packet: the
    n-th packets of all runs go through decode and resample, then VAD in one model call, then each
    through its turn detector and recogniser. Per uplink it is exactly `feed_run` (order, the stop after
    a turn event); an exception in one uplink's stages is that uplink's outcome, the others go on."""
    outcomes: list[Outcomes | BaseException] = [[] for _ in runs]
    live = [i for i, (_, payloads) in enumerate(runs) if payloads]
    step = 0
    while live:
        fronts: dict[int, list[Frame]] = {}
        for i in live:
            try:
                fronts[i] = runs[i][0]._front.push(UplinkPacket(runs[i][1][step]))
            except Exception as exc:
                outcomes[i] = exc
        chunks = [(i, f) for i, frames in fronts.items() for f in frames if isinstance(f, Pcm)]
        activity = iter(VadStage.process_together([(runs[i][0]._vad, f) for i, f in chunks]))
        step += 1
        still: list[int] = []
        for i, frames in fronts.items():
            uplink, out = runs[i][0], []
            try:
                for frame in frames:
                    out.extend(uplink._back.push(next(activity) if isinstance(frame, Pcm) else frame))
            except Exception as exc:
                outcomes[i] = exc
                continue
            done = outcomes[i]
            assert isinstance(done, list)
            done.append(out)
            if step < len(runs[i][1]) and not (out and any(_is_turn_event(f) for f in out)):
                still.append(i)
        live = still
    return outcomes


def utterance_of(frames: Iterable[Frame]) -> Utterance | None:
    """The `Utterance` among an uplink call's frames, waiting for its words if they are still decoding (for
    callers with no event loop; the session awaits them with `settle_async` instead)."""
    for frame in frames:
        if isinstance(frame, Utterance):
            return frame
        if isinstance(frame, Transcribing):
            return next(f for f in settle(frame) if isinstance(f, Utterance))
    return None

