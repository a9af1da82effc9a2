"""The uplink stages alone: frames in, frames out, with no socket and no model.

decode → resample → VAD → turn detection → recognition, then `Chain` and `Uplink.feed_run` joining them.
Every test double here is a few lines: a decoder, a VAD stream that returns the probabilities it is
given (or scores loudness), and an ASR engine whose streams record what they were asked to do.
"""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest
from wren.config import VadConfig
from wren.pipeline.frames import (
    EndOfInput,
    Frame,
    InputEnd,
    Pcm,
    SpeechOnset,
    SpeechPause,
    SpeechResume,
    StageError,
    TextDelta,
    UplinkPacket,
    Utterance,
    VoiceActivity,
)
from wren.pipeline.recognise import RecogniseStage
from wren.pipeline.stage import BlockingStage, Chain
from wren.pipeline.turn_detection import HYSTERESIS, ListenMode, TurnDetector
from wren.pipeline.uplink import DecodeStage, ResampleStage, Uplink, VadStage, feed_together, utterance_of
from wren.speech.asr.errors import AsrError
from wren.speech.codec import CodecError

WINDOW_MS = 32  # Silero's 512-sample window at 16 kHz
WINDOW_BYTES = 16000 * WINDOW_MS // 1000 * 2
SPEECH = 0.9
QUIET = 0.0

# ---- test doubles ---------------------------------------------------------------------------------


class FakeDecoder:
    """PCM passes through; a payload starting with b"BAD" is corrupt."""

    def __init__(self) -> None:
        self.decoded: list[bytes] = []

    def decode(self, packet: bytes) -> bytes:
        if packet.startswith(b"BAD"):
            raise CodecError("corrupt packet")
        self.decoded.append(packet)
        return packet


class ScriptedVadStream:
    """Returns the next list of probabilities for each chunk it is given."""

    window_ms = WINDOW_MS

    def __init__(self, script: list[list[float]]) -> None:
        self.script = list(script)
        self.chunks: list[bytes] = []
        self.closed = False

    def process(self, pcm: bytes) -> list[float]:
        self.chunks.append(pcm)
        return self.script.pop(0)

    def close(self) -> None:
        self.closed = True


class LoudnessVadStream:
    """One probability per whole 32 ms window: SPEECH if any sample is non-zero, else QUIET."""

    window_ms = WINDOW_MS

    def __init__(self) -> None:
        self._buffer = b""
        self.closed = False

    def process(self, pcm: bytes) -> list[float]:
        self._buffer += pcm
        out = []
        while len(self._buffer) >= WINDOW_BYTES:
            window, self._buffer = self._buffer[:WINDOW_BYTES], self._buffer[WINDOW_BYTES:]
            out.append(SPEECH if any(window) else QUIET)
        return out

    def close(self) -> None:
        self.closed = True


class FakeVad:
    def __init__(self) -> None:
        self.streams: list[LoudnessVadStream] = []

    def new_stream(self, room=None) -> LoudnessVadStream:
        self.streams.append(LoudnessVadStream())
        return self.streams[-1]


class FakeAsrStream:
    """Records every call; `fail_on` names the calls that raise AsrError."""

    def __init__(self, text: str = "  turn the lights on  ", fail_on: tuple[str, ...] = ()) -> None:
        self.text = text
        self.fail_on = set(fail_on)
        self.calls: list[str] = []
        self.accepted: list[bytes] = []

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail_on:
            raise AsrError(f"{name} failed: the recogniser's worker died")

    def accept(self, pcm: bytes) -> None:
        self._call("accept")
        self.accepted.append(pcm)

    def finish(self) -> str:
        self._call("finish")
        return self.text

    def close(self) -> None:
        self._call("close")


class HintedAsrStream(FakeAsrStream):
    """A whole-utterance recogniser (moonshine-like): takes pause/resume hints and a phrase bias."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.biased: list[tuple[tuple[str, ...], float]] = []
        self.drafting: list[bool] = []

    def drafts(self, enabled: bool) -> None:
        self.drafting.append(enabled)

    def pause(self) -> None:
        self._call("pause")

    def resume(self) -> None:
        self._call("resume")

    def bias(self, phrases: tuple[str, ...], strength: float) -> None:
        self.biased.append((phrases, strength))


class FakeAsrEngine:
    def __init__(self, make_stream=FakeAsrStream, fail_open: bool = False) -> None:
        self._make_stream = make_stream
        self.fail_open = fail_open
        self.streams: list[FakeAsrStream] = []
        self.speakers: list[str | None] = []

    def open_stream(self, speaker: str | None = None) -> FakeAsrStream:
        self.speakers.append(speaker)
        if self.fail_open:
            raise AsrError("no recogniser available")
        self.streams.append(self._make_stream())
        return self.streams[-1]


# ---- helpers --------------------------------------------------------------------------------------


def activity(*probabilities: float) -> VoiceActivity:
    """A 16 kHz chunk exactly as long as its windows, with those windows' probabilities."""
    return VoiceActivity(Pcm(bytes(WINDOW_BYTES * len(probabilities)), 16000), probabilities, WINDOW_MS)


def windows(ms: int) -> int:
    """Whole VAD windows needed to reach `ms`."""
    return math.ceil(ms / WINDOW_MS)


def events(frames) -> list[Frame]:
    return [f for f in frames if not isinstance(f, Pcm)]


def feed_windows(detector: TurnDetector, probability: float, count: int) -> list[Frame]:
    """`count` one-window chunks; the events they produced."""
    out: list[Frame] = []
    for _ in range(count):
        out.extend(events(detector.process(activity(probability))))
    return out


def started(config: VadConfig, mode: ListenMode) -> TurnDetector:
    detector = TurnDetector(config, mode)
    assert feed_windows(detector, SPEECH, windows(config.min_speech_ms)) == [SpeechOnset()]
    return detector


# ---- DecodeStage, ResampleStage, VadStage ----------------------------------------------------------


def test_decode_turns_a_good_packet_into_pcm_at_the_device_rate():
    stage = DecodeStage(FakeDecoder(), 24000)
    assert list(stage.process(UplinkPacket(b"\x01\x02\x03\x04"))) == [Pcm(b"\x01\x02\x03\x04", 24000)]


def test_decode_turns_a_corrupt_packet_into_a_stage_error_and_goes_on():
    decoder = FakeDecoder()
    stage = DecodeStage(decoder, 16000)
    [error] = stage.process(UplinkPacket(b"BAD!"))
    assert isinstance(error, StageError)
    assert error.stage == "decode" and isinstance(error.error, CodecError) and error.recoverable
    assert list(stage.process(UplinkPacket(b"\x00\x00"))) == [Pcm(b"\x00\x00", 16000)]


def test_decode_passes_other_frames_through():
    end = EndOfInput(InputEnd.LISTEN_STOP, 1.0)
    assert list(DecodeStage(FakeDecoder(), 16000).process(end)) == [end]


def test_resample_converts_to_16k_and_keeps_the_stream_length():
    stage = ResampleStage(48000)
    chunk = b"\x00\x10" * 2880  # 60 ms at 48 kHz
    out = [f for _ in range(20) for f in stage.process(Pcm(chunk, 48000))]
    assert out and all(isinstance(f, Pcm) and f.rate == 16000 for f in out)
    produced_ms = sum(f.duration_ms for f in out)
    assert 20 * 60 - 30 <= produced_ms <= 20 * 60  # the filter holds back a few ms, never adds any


def test_resample_passes_16k_through_unchanged():
    chunk = bytes(range(200)) * 4
    assert list(ResampleStage(16000).process(Pcm(chunk, 16000))) == [Pcm(chunk, 16000)]


def test_resample_puts_out_nothing_for_a_chunk_that_yields_no_samples():
    stage = ResampleStage(16000)
    assert list(stage.process(Pcm(b"\x01", 16000))) == []  # half a sample: kept for the next chunk
    assert list(stage.process(Pcm(b"\x02", 16000))) == [Pcm(b"\x01\x02", 16000)]


def test_resample_passes_other_frames_through():
    onset = SpeechOnset()
    assert list(ResampleStage(48000).process(onset)) == [onset]


def test_vad_attaches_the_probabilities_of_the_windows_a_chunk_completed():
    vad = ScriptedVadStream([[0.1, 0.8], []])
    stage = VadStage(vad)
    chunk = Pcm(bytes(2 * WINDOW_BYTES), 16000)
    assert list(stage.process(chunk)) == [VoiceActivity(chunk, (0.1, 0.8), WINDOW_MS)]
    small = Pcm(bytes(10), 16000)
    assert list(stage.process(small)) == [VoiceActivity(small, (), WINDOW_MS)]
    assert vad.chunks == [chunk.pcm, small.pcm]


def test_vad_passes_other_frames_through_and_closes_its_stream():
    vad = ScriptedVadStream([])
    stage = VadStage(vad)
    error = StageError("decode", CodecError("x"))
    assert list(stage.process(error)) == [error]
    stage.close()
    assert vad.closed


# ---- TurnDetector ---------------------------------------------------------------------------------


def test_onset_comes_only_after_min_speech_ms_of_consecutive_speech():
    config = VadConfig()
    needed = windows(config.min_speech_ms)
    detector = TurnDetector(config, ListenMode.AUTO)
    assert feed_windows(detector, SPEECH, needed - 1) == []
    assert feed_windows(detector, QUIET, 1) == []  # a quiet window starts the count again
    assert feed_windows(detector, SPEECH, needed - 1) == []
    assert not detector.heard_speech
    assert feed_windows(detector, SPEECH, 1) == [SpeechOnset()]
    assert detector.heard_speech
    assert feed_windows(detector, SPEECH, 10) == []  # one onset per utterance


def test_below_threshold_is_not_speech_before_onset_but_is_after_it():
    config = VadConfig()
    in_between = config.threshold - HYSTERESIS / 2
    detector = TurnDetector(config, ListenMode.AUTO)
    assert feed_windows(detector, in_between, 50) == []
    assert not detector.heard_speech
    detector = started(config, ListenMode.AUTO)
    assert feed_windows(detector, in_between, 50) == []  # still speaking: no pause, no end
    assert not detector.ended


def test_the_audio_chunk_comes_out_before_the_events_of_that_chunk():
    config = VadConfig()
    detector = TurnDetector(config, ListenMode.AUTO)
    chunk = activity(*[SPEECH] * windows(config.min_speech_ms))
    assert list(detector.process(chunk)) == [chunk.audio, SpeechOnset()]
    chunk = activity(*[QUIET] * windows(config.silence_ms))
    out = list(detector.process(chunk))
    assert out[0] == chunk.audio
    assert [type(f) for f in out[1:]] == [SpeechPause, EndOfInput]


def test_pause_after_pause_ms_of_silence_then_resume_when_speech_returns():
    config = VadConfig()
    detector = started(config, ListenMode.AUTO)
    pause = windows(config.pause_ms)
    assert feed_windows(detector, QUIET, pause - 1) == []
    assert feed_windows(detector, QUIET, 1) == [SpeechPause()]
    assert feed_windows(detector, QUIET, 2) == []  # one pause per silence
    assert feed_windows(detector, SPEECH, 1) == [SpeechResume()]
    assert feed_windows(detector, SPEECH, 3) == []


def test_a_silence_shorter_than_pause_ms_is_neither_pause_nor_resume():
    config = VadConfig()
    detector = started(config, ListenMode.AUTO)
    for _ in range(5):
        assert feed_windows(detector, QUIET, windows(config.pause_ms) - 1) == []
        assert feed_windows(detector, SPEECH, 1) == []


@pytest.mark.parametrize("mode", [ListenMode.AUTO, ListenMode.REALTIME])
def test_auto_and_realtime_end_after_silence_ms_of_silence(mode):
    config = VadConfig()
    detector = started(config, mode)
    silence = windows(config.silence_ms)
    assert feed_windows(detector, QUIET, silence - 1) == [SpeechPause()]
    assert not detector.ended
    [end] = feed_windows(detector, QUIET, 1)
    assert isinstance(end, EndOfInput) and end.reason is InputEnd.SILENCE
    assert end.heard_speech
    assert end.audio_ms == int((windows(config.min_speech_ms) + silence) * WINDOW_MS)
    assert detector.ended


def test_silence_after_a_resume_is_counted_afresh():
    config = VadConfig()
    detector = started(config, ListenMode.AUTO)
    silence = windows(config.silence_ms)
    assert feed_windows(detector, QUIET, silence - 1) == [SpeechPause()]
    assert feed_windows(detector, SPEECH, 1) == [SpeechResume()]
    assert feed_windows(detector, QUIET, silence - 1) == [SpeechPause()]
    assert not detector.ended


def test_manual_never_ends_by_silence():
    config = VadConfig()
    detector = started(config, ListenMode.MANUAL)
    assert feed_windows(detector, QUIET, 20 * windows(config.silence_ms)) == [SpeechPause()]
    assert not detector.ended


@pytest.mark.parametrize("mode", list(ListenMode))
def test_every_mode_ends_at_max_utterance_length(mode):
    config = VadConfig(max_utterance_s=1.0)
    detector = TurnDetector(config, mode)
    chunk = activity(*[SPEECH] * 10)  # 320 ms of speech; onset is inside the first chunk
    chunks_to_max = math.ceil(config.max_utterance_s * 1000 / chunk.audio.duration_ms)
    seen = [events(detector.process(chunk)) for _ in range(chunks_to_max)]
    assert seen[0] == [SpeechOnset()]
    assert all(s == [] for s in seen[1:-1])
    [end] = seen[-1]
    assert end.reason is InputEnd.MAX_LENGTH and end.heard_speech
    assert end.audio_ms == int(chunks_to_max * chunk.audio.duration_ms)
    assert detector.ended


@pytest.mark.parametrize("mode", [ListenMode.AUTO, ListenMode.REALTIME])
def test_listening_without_any_speech_ends_with_no_speech_when_the_mode_ends_by_vad(mode):
    config = VadConfig(no_speech_timeout_s=1.0)
    detector = TurnDetector(config, mode)
    chunk = activity(*[QUIET] * 10)
    chunks_to_timeout = math.ceil(config.no_speech_timeout_s * 1000 / chunk.audio.duration_ms)
    seen = [events(detector.process(chunk)) for _ in range(chunks_to_timeout)]
    assert all(s == [] for s in seen[:-1])
    [end] = seen[-1]
    assert end.reason is InputEnd.NO_SPEECH and not end.heard_speech
    assert end.audio_ms == int(chunks_to_timeout * chunk.audio.duration_ms)


def test_manual_listening_without_speech_never_times_out():
    config = VadConfig(no_speech_timeout_s=1.0)
    detector = TurnDetector(config, ListenMode.MANUAL)
    chunk = activity(*[QUIET] * 10)
    for _ in range(30):  # ≈ 10 × the timeout
        assert events(detector.process(chunk)) == []
    assert not detector.ended


def test_the_default_no_speech_timeout_is_not_reached_early():
    config = VadConfig()
    detector = TurnDetector(config, ListenMode.AUTO)
    silent_second = VoiceActivity(Pcm(bytes(32000), 16000), (QUIET,) * 31, WINDOW_MS)
    whole_seconds = int(config.no_speech_timeout_s)
    assert [events(detector.process(silent_second)) for _ in range(whole_seconds - 1)] == [[]] * (
        whole_seconds - 1
    )
    [end] = events(detector.process(silent_second))
    assert end.reason is InputEnd.NO_SPEECH


def test_an_end_of_input_pushed_in_gets_the_detectors_counts():
    config = VadConfig()
    detector = started(config, ListenMode.MANUAL)
    feed_windows(detector, QUIET, 3)
    heard_ms = (windows(config.min_speech_ms) + 3) * WINDOW_MS
    [end] = detector.process(EndOfInput(InputEnd.LISTEN_STOP, 12.5))
    assert end == EndOfInput(InputEnd.LISTEN_STOP, 12.5, heard_speech=True, audio_ms=heard_ms)
    assert detector.ended


def test_an_end_of_input_pushed_in_before_any_speech_says_nothing_was_heard():
    detector = TurnDetector(VadConfig(), ListenMode.MANUAL)
    detector.process(activity(QUIET, QUIET))
    [end] = detector.process(EndOfInput(InputEnd.LISTEN_STOP, 3.0))
    assert end == EndOfInput(InputEnd.LISTEN_STOP, 3.0, heard_speech=False, audio_ms=2 * WINDOW_MS)


def test_nothing_passes_after_the_end():
    config = VadConfig()
    detector = started(config, ListenMode.AUTO)
    feed_windows(detector, QUIET, windows(config.silence_ms))
    assert detector.ended
    assert list(detector.process(activity(SPEECH, SPEECH))) == []
    assert list(detector.process(EndOfInput(InputEnd.LISTEN_STOP, 1.0))) == []
    assert list(detector.process(StageError("decode", CodecError("x")))) == []


def test_other_frames_pass_the_detector_unchanged():
    error = StageError("decode", CodecError("x"))
    assert list(TurnDetector(VadConfig(), ListenMode.AUTO).process(error)) == [error]


# ---- RecogniseStage -------------------------------------------------------------------------------


def chunk(i: int, size: int = 100) -> Pcm:
    return Pcm(bytes([i]) * size, 16000)


def test_no_recogniser_is_opened_before_onset():
    engine = FakeAsrEngine()
    stage = RecogniseStage(engine, preroll_bytes=1000)
    for i in range(20):
        assert list(stage.process(chunk(i))) == []
    assert list(stage.process(SpeechPause())) == []
    assert list(stage.process(SpeechResume())) == []
    assert engine.streams == [] and engine.speakers == []


def test_onset_opens_the_recogniser_for_the_speaker_and_feeds_the_preroll():
    engine = FakeAsrEngine()
    stage = RecogniseStage(engine, preroll_bytes=300, speaker="kitchen")
    for i in range(6):
        stage.process(chunk(i))
    assert list(stage.process(SpeechOnset())) == [SpeechOnset()]
    [stream] = engine.streams
    assert engine.speakers == ["kitchen"]
    assert b"".join(stream.accepted) == b"".join(chunk(i).pcm for i in (3, 4, 5))  # the last 300 bytes
    assert list(stage.process(chunk(6))) == []
    assert stream.accepted[-1] == chunk(6).pcm


def test_the_preroll_keeps_the_fewest_latest_chunks_that_cover_it():
    engine = FakeAsrEngine()
    stage = RecogniseStage(engine, preroll_bytes=250)
    for i in range(6):
        stage.process(chunk(i))
    stage.process(SpeechOnset())
    assert engine.streams[0].accepted == [chunk(i).pcm for i in (3, 4, 5)]


def test_a_short_preroll_is_fed_whole():
    engine = FakeAsrEngine()
    stage = RecogniseStage(engine, preroll_bytes=10_000)
    for i in range(3):
        stage.process(chunk(i))
    stage.process(SpeechOnset())
    assert engine.streams[0].accepted == [chunk(i).pcm for i in range(3)]


def test_onset_applies_the_phrase_bias_when_the_recogniser_takes_one():
    engine = FakeAsrEngine(HintedAsrStream)
    stage = RecogniseStage(engine, 100, bias=lambda: (("lights on", "timer"), 0.7))
    stage.process(SpeechOnset())
    assert engine.streams[0].biased == [(("lights on", "timer"), 0.7)]


def test_onset_tells_the_recogniser_whether_to_draft_while_speaking():
    engine = FakeAsrEngine(HintedAsrStream)
    for drafts in (True, False):
        RecogniseStage(engine, 100, drafts=drafts).process(SpeechOnset())
    assert [stream.drafting for stream in engine.streams] == [[True], [False]]


def test_pause_and_resume_are_passed_as_hints_to_a_recogniser_that_takes_them():
    engine = FakeAsrEngine(HintedAsrStream)
    stage = RecogniseStage(engine, 100)
    stage.process(SpeechOnset())
    assert list(stage.process(SpeechPause())) == []
    assert list(stage.process(SpeechResume())) == []
    assert [c for c in engine.streams[0].calls if c != "accept"] == ["pause", "resume"]


def test_pause_and_resume_are_dropped_for_a_recogniser_without_hints():
    engine = FakeAsrEngine(FakeAsrStream)
    stage = RecogniseStage(engine, 100)
    stage.process(SpeechOnset())
    assert list(stage.process(SpeechPause())) == []
    assert list(stage.process(SpeechResume())) == []
    assert engine.streams[0].calls == []


def test_end_of_input_gives_the_utterance_with_the_stripped_text_and_releases_the_stream():
    engine = FakeAsrEngine()
    stage = RecogniseStage(engine, 100)
    stage.process(chunk(1))
    stage.process(SpeechOnset())
    stage.process(chunk(2))
    at = time.monotonic()
    [utterance] = stage.process(EndOfInput(InputEnd.SILENCE, at, heard_speech=True, audio_ms=840))
    assert utterance.text == "turn the lights on"
    assert (utterance.heard_speech, utterance.audio_ms, utterance.reason) == (True, 840, InputEnd.SILENCE)
    assert utterance.ended_at == at and utterance.decoded_at >= at
    assert engine.streams[0].calls == ["accept", "accept", "finish", "close"]


def test_end_of_input_without_speech_gives_an_empty_utterance_and_opens_nothing():
    engine = FakeAsrEngine()
    stage = RecogniseStage(engine, 100)
    stage.process(chunk(1))
    [utterance] = stage.process(EndOfInput(InputEnd.NO_SPEECH, 5.0, heard_speech=False, audio_ms=8000))
    assert (utterance.text, utterance.heard_speech, utterance.reason) == ("", False, InputEnd.NO_SPEECH)
    assert engine.streams == []


def test_a_recogniser_failing_on_accept_costs_only_the_words():
    engine = FakeAsrEngine(lambda: FakeAsrStream(fail_on=("accept",)))
    stage = RecogniseStage(engine, 100)
    stage.process(chunk(1))
    out = list(stage.process(SpeechOnset()))  # the preroll is accepted here, and fails
    assert out[0] == SpeechOnset()
    [error] = out[1:]
    assert isinstance(error, StageError) and error.stage == "recognise" and isinstance(error.error, AsrError)
    [stream] = engine.streams
    assert stream.calls == ["accept", "close"]  # released at once
    assert list(stage.process(chunk(2))) == []  # later audio is dropped, no second recogniser
    [utterance] = stage.process(EndOfInput(InputEnd.SILENCE, 1.0, heard_speech=True, audio_ms=300))
    assert isinstance(utterance, Utterance) and utterance.text == "" and utterance.heard_speech
    assert len(engine.streams) == 1 and stream.calls == ["accept", "close"]  # finish never called


def test_a_recogniser_failing_mid_utterance_gives_a_stage_error_then_an_empty_utterance():
    engine = FakeAsrEngine()
    stage = RecogniseStage(engine, 100)
    stage.process(SpeechOnset())
    engine.streams[0].fail_on.add("accept")
    [error] = stage.process(chunk(1))
    assert isinstance(error, StageError)
    [utterance] = stage.process(EndOfInput(InputEnd.LISTEN_STOP, 1.0, True, 120))
    assert utterance.text == ""


def test_a_recogniser_that_cannot_be_opened_gives_a_stage_error_and_an_empty_utterance():
    engine = FakeAsrEngine(fail_open=True)
    stage = RecogniseStage(engine, 100)
    stage.process(chunk(1))
    onset, error = stage.process(SpeechOnset())
    assert onset == SpeechOnset() and isinstance(error, StageError)
    assert list(stage.process(SpeechPause())) == []
    [utterance] = stage.process(EndOfInput(InputEnd.SILENCE, 1.0, True, 300))
    assert utterance.text == ""


def test_a_recogniser_failing_at_finish_gives_a_stage_error_and_an_empty_utterance():
    engine = FakeAsrEngine(lambda: FakeAsrStream(fail_on=("finish",)))
    stage = RecogniseStage(engine, 100)
    stage.process(SpeechOnset())
    error, utterance = stage.process(EndOfInput(InputEnd.SILENCE, 1.0, True, 300))
    assert isinstance(error, StageError) and isinstance(error.error, AsrError)
    assert isinstance(utterance, Utterance) and utterance.text == ""
    assert engine.streams[0].calls == ["finish", "close"]


def test_close_releases_the_recogniser_once():
    engine = FakeAsrEngine()
    stage = RecogniseStage(engine, 100)
    stage.process(SpeechOnset())
    stage.close()
    stage.close()
    assert engine.streams[0].calls == ["close"]


def test_close_swallows_a_recogniser_that_cannot_be_released():
    engine = FakeAsrEngine(lambda: FakeAsrStream(fail_on=("close",)))
    stage = RecogniseStage(engine, 100)
    stage.process(SpeechOnset())
    stage.close()
    assert engine.streams[0].calls == ["close"]


def test_other_frames_pass_the_recogniser_unchanged():
    error = StageError("decode", CodecError("x"))
    assert list(RecogniseStage(FakeAsrEngine(), 100).process(error)) == [error]


# ---- Chain ----------------------------------------------------------------------------------------


class Tagger(BlockingStage):
    """Appends its tag to every TextDelta, `fan_out` copies each; records what it saw."""

    def __init__(self, tag: str, log: list, fan_out: int = 1, close_error: Exception | None = None) -> None:
        self.name = tag
        self.tag = tag
        self.log = log
        self.fan_out = fan_out
        self.close_error = close_error

    def process(self, frame: Frame):
        self.log.append((self.tag, frame))
        if not isinstance(frame, TextDelta):
            return (frame,)
        suffixes = [str(n) for n in range(self.fan_out)] if self.fan_out > 1 else [""]
        return [TextDelta(f"{frame.text}{self.tag}{suffix}") for suffix in suffixes]

    def close(self) -> None:
        self.log.append((self.tag, "close"))
        if self.close_error is not None:
            raise self.close_error


class Swallow(BlockingStage):
    def process(self, frame: Frame):
        return ()


def test_chain_passes_frames_through_the_stages_in_order():
    log: list = []
    chain = Chain([Tagger("a", log, fan_out=2), Tagger("b", log)])
    assert chain.push(TextDelta("x")) == [TextDelta("xa0b"), TextDelta("xa1b")]
    assert log == [("a", TextDelta("x")), ("b", TextDelta("xa0")), ("b", TextDelta("xa1"))]
    assert chain.push(SpeechOnset()) == [SpeechOnset()]


def test_chain_stops_where_a_stage_puts_out_nothing():
    log: list = []
    chain = Chain([Tagger("a", log), Swallow(), Tagger("c", log)])
    assert chain.push(TextDelta("x")) == []
    assert log == [("a", TextDelta("x"))]


def test_chain_close_closes_every_stage_even_if_one_raises_then_reraises():
    log: list = []
    first, second = RuntimeError("first"), RuntimeError("second")
    chain = Chain([
        Tagger("a", log, close_error=first),
        Tagger("b", log),
        Tagger("c", log, close_error=second),
    ])
    with pytest.raises(RuntimeError) as caught:
        chain.close()
    assert caught.value is first
    assert log == [("a", "close"), ("b", "close"), ("c", "close")]


# ---- Uplink ---------------------------------------------------------------------------------------

PACKET_MS = 60
PACKET_BYTES = 16000 * PACKET_MS // 1000 * 2
SPEECH_PACKET = b"\x00\x10" * (PACKET_BYTES // 2)
SILENT_PACKET = bytes(PACKET_BYTES)


def make_uplink(mode: ListenMode = ListenMode.AUTO, engine: FakeAsrEngine | None = None):
    speech = SimpleNamespace(vad=FakeVad(), asr=engine or FakeAsrEngine())
    decoder = FakeDecoder()
    uplink = Uplink(speech, VadConfig(), decoder, 16000, mode, speaker="kitchen")
    return uplink, speech, decoder


def test_feed_run_stops_after_the_packet_that_produced_speech_onset():
    uplink, speech, decoder = make_uplink()
    config = VadConfig()
    onset_packet = math.ceil(windows(config.min_speech_ms) * WINDOW_MS / PACKET_MS)  # 1-based
    outcomes = uplink.feed_run([SPEECH_PACKET] * 20)
    assert len(outcomes) == onset_packet
    assert outcomes[:-1] == [[]] * (onset_packet - 1)
    assert outcomes[-1] == [SpeechOnset()]
    assert len(decoder.decoded) == onset_packet  # the packets after it are not touched yet
    assert uplink.heard_speech and not uplink.ended
    [stream] = speech.asr.streams
    assert speech.asr.speakers == ["kitchen"]
    assert b"".join(stream.accepted) == SPEECH_PACKET * onset_packet  # all of it is within the preroll


def test_feed_run_stops_after_the_packet_that_produced_the_utterance():
    uplink, speech, _ = make_uplink()
    uplink.feed_run([SPEECH_PACKET] * 20)
    outcomes = uplink.feed_run([SILENT_PACKET] * 30)
    assert len(outcomes) < 30
    assert all(utterance_of(o) is None for o in outcomes[:-1])
    utterance = utterance_of(outcomes[-1])
    assert utterance is not None and utterance.text == "turn the lights on"
    assert utterance.reason is InputEnd.SILENCE and utterance.heard_speech
    assert uplink.ended
    assert speech.asr.streams[0].calls[-2:] == ["finish", "close"]


def test_feed_run_without_speech_consumes_the_whole_run():
    uplink, _, decoder = make_uplink()
    outcomes = uplink.feed_run([SILENT_PACKET] * 10)
    assert outcomes == [[]] * 10 and len(decoder.decoded) == 10


def test_feed_run_reports_a_corrupt_packet_and_carries_on():
    uplink, _, _ = make_uplink()
    outcomes = uplink.feed_run([SILENT_PACKET, b"BAD", SILENT_PACKET])
    assert len(outcomes) == 3
    [error] = outcomes[1]
    assert isinstance(error, StageError) and error.stage == "decode"
    assert outcomes[0] == outcomes[2] == []


@pytest.mark.parametrize(
    ("mode", "drafts"), [(ListenMode.MANUAL, True), (ListenMode.AUTO, False), (ListenMode.REALTIME, False)]
)
def test_only_push_to_talk_drafts_while_speaking(mode, drafts):
    """A VAD-ended turn leaves the guess at the pause `silence_ms` to finish; listen stop may come at once."""
    uplink, speech, _ = make_uplink(mode, FakeAsrEngine(HintedAsrStream))
    uplink.feed_run([SPEECH_PACKET] * 5)
    assert speech.asr.streams[0].drafting == [drafts]


def test_end_gives_the_manual_utterance_and_close_releases_everything_once():
    uplink, speech, _ = make_uplink(ListenMode.MANUAL)
    fed = len(uplink.feed_run([SPEECH_PACKET] * 5))  # up to the onset
    fed += len(uplink.feed_run([SILENT_PACKET] * 30))  # manual: silence never ends it
    assert not uplink.ended
    utterance = utterance_of(uplink.end())
    assert utterance is not None and utterance.reason is InputEnd.LISTEN_STOP
    assert utterance.text == "turn the lights on" and utterance.heard_speech
    assert utterance.audio_ms == fed * PACKET_MS
    uplink.close()
    uplink.close()
    assert speech.vad.streams[0].closed
    assert speech.asr.streams[0].calls.count("close") == 1


def _runs() -> list[list[bytes]]:
    return [
        [SPEECH_PACKET] * 20,  # stops at its onset
        [SILENT_PACKET] * 10,  # consumed whole
        [SILENT_PACKET, b"BAD", SPEECH_PACKET, SPEECH_PACKET, SPEECH_PACKET, SILENT_PACKET],  # onset at 5
        [],
    ]


def test_uplinks_fed_together_get_exactly_what_each_gets_alone():
    """The listen executor feeds all waiting sessions at once; per session nothing may change."""
    alone = [make_uplink()[0].feed_run(run) for run in _runs()]
    uplinks = [make_uplink() for _ in _runs()]
    together = feed_together([(uplink, run) for (uplink, _, _), run in zip(uplinks, _runs(), strict=True)])
    assert [list(map(repr, o)) for o in together] == [list(map(repr, o)) for o in alone]
    assert [len(o) for o in together][1:] == [10, 5, 0]
    assert together[0][-1] == together[2][-1] == [SpeechOnset()]
    assert len(uplinks[0][2].decoded) == len(together[0])  # nothing after the onset was touched


def test_an_uplink_that_fails_in_a_batch_costs_only_its_own_run():
    class BrokenDecoder(FakeDecoder):
        def decode(self, packet: bytes) -> bytes:
            raise RuntimeError("a bug in one session's stage")

    broken = Uplink(SimpleNamespace(vad=FakeVad(), asr=FakeAsrEngine()), VadConfig(), BrokenDecoder(), 16000,
                    ListenMode.AUTO)
    fine = make_uplink()[0]
    failed, outcomes = feed_together([(broken, [SILENT_PACKET] * 3), (fine, [SILENT_PACKET] * 3)])
    assert isinstance(failed, RuntimeError)
    assert outcomes == [[]] * 3
    with pytest.raises(RuntimeError):
        broken.feed_run([SILENT_PACKET])


def test_an_uplink_goes_on_from_the_last_utterances_room():
    class RoomVad(FakeVad):
        def new_stream(self, room=None):
            stream = super().new_stream(room)
            stream.room = room if room is not None else object()
            return stream

    speech = SimpleNamespace(vad=RoomVad(), asr=FakeAsrEngine())
    first = Uplink(speech, VadConfig(), FakeDecoder(), 16000, ListenMode.AUTO)
    second = Uplink(speech, VadConfig(), FakeDecoder(), 16000, ListenMode.AUTO, room=first.room)
    assert second.room is first.room
    assert make_uplink()[0].room is None  # a VAD without a noise floor
