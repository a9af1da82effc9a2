"""Push-to-talk pauses by level: a chunk at the room's noise floor after speech is a pause at once.

First with a room whose floor the test sets and probabilities it scripts (the rule itself), then with the
real Silero model on a piper-spoken request under 30 dB SNR noise, packet by packet as a device sends it,
where the point is when the recogniser hears of the pause: within one packet of the last word, where the
VAD's probability alone tells it 120-180 ms later, about when the button comes up.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from wren.config import VadConfig
from wren.pipeline.frames import Pcm, SpeechOnset, SpeechPause, SpeechResume, VoiceActivity
from wren.pipeline.turn_detection import ListenMode, TurnDetector
from wren.pipeline.uplink import Uplink

WINDOW_MS = 32
WINDOW_SAMPLES = 512
SPEECH = 0.9
FLOOR_RMS = 100  # the room, in 16-bit sample units (about -50 dBFS)


class Room:
    """A noise floor as the VAD stream keeps it: mean square of float samples, None while unknown."""

    def __init__(self, rms: float | None = FLOOR_RMS) -> None:
        self.mean_square = None if rms is None else (rms / 32768) ** 2


def chunk(rms: float, probability: float, count: int = 2) -> VoiceActivity:
    """`count` windows of steady noise at `rms`, each scored `probability` by the (scripted) VAD."""
    samples = np.random.default_rng(1).normal(0, rms, WINDOW_SAMPLES * count)
    pcm = np.clip(samples, -32768, 32767).astype("<i2").tobytes()
    return VoiceActivity(Pcm(pcm, 16000), (probability,) * count, WINDOW_MS)


def speaking(mode: ListenMode, room: Room | None, config: VadConfig | None = None) -> TurnDetector:
    detector = TurnDetector(config or VadConfig(), mode, room=room)
    onset = [events(detector.process(chunk(3000, SPEECH))) for _ in range(3)]
    assert [SpeechOnset()] in onset
    return detector


def events(frames) -> list:
    return [f for f in frames if not isinstance(f, Pcm)]


def test_push_to_talk_pauses_at_the_first_chunk_at_room_level_while_the_vad_still_says_speech():
    detector = speaking(ListenMode.MANUAL, Room())
    assert events(detector.process(chunk(FLOOR_RMS, SPEECH))) == [SpeechPause()]
    # The VAD's probability trails the word: quiet chunks it still scores as speech are no resume.
    assert events(detector.process(chunk(FLOOR_RMS, SPEECH))) == []
    assert events(detector.process(chunk(3000, SPEECH))) == [SpeechResume()]
    assert events(detector.process(chunk(FLOOR_RMS, SPEECH))) == [SpeechPause()]


def test_a_chunk_clearly_above_the_room_is_left_to_the_vad():
    detector = speaking(ListenMode.MANUAL, Room())
    assert events(detector.process(chunk(FLOOR_RMS * 2, SPEECH))) == []  # +6 dB: louder than the margin
    assert events(detector.process(chunk(FLOOR_RMS * 2, 0.0))) == [SpeechPause()]  # the VAD's own pause


@pytest.mark.parametrize("mode", [ListenMode.AUTO, ListenMode.REALTIME])
def test_modes_that_end_by_vad_pause_by_the_vad_alone(mode):
    detector = speaking(mode, Room())
    assert events(detector.process(chunk(FLOOR_RMS, SPEECH))) == []
    assert events(detector.process(chunk(FLOOR_RMS, 0.0))) == [SpeechPause()]


@pytest.mark.parametrize(
    ("room", "config"),
    [(None, VadConfig()), (Room(rms=None), VadConfig()), (Room(), VadConfig(quiet_margin_db=0))],
    ids=["no-room", "floor-not-known-yet", "turned-off"],
)
def test_without_a_known_floor_or_with_the_margin_off_push_to_talk_pauses_by_the_vad(room, config):
    detector = speaking(ListenMode.MANUAL, room, config)
    assert events(detector.process(chunk(FLOOR_RMS, SPEECH))) == []
    assert events(detector.process(chunk(FLOOR_RMS, 0.0))) == [SpeechPause()]


def test_quiet_before_any_speech_is_no_pause():
    detector = TurnDetector(VadConfig(), ListenMode.MANUAL, room=Room())
    assert [events(detector.process(chunk(FLOOR_RMS, 0.0))) for _ in range(5)] == [[]] * 5


# ---- with the real Silero model and a spoken request -------------------------------------------------

PACKET_SAMPLES = 960  # 60 ms, as a device sends them


class PauseClock:
    """A recogniser that notes at which packet each pause hint came."""

    def __init__(self) -> None:
        self.packet = 0
        self.pauses: list[int] = []

    def open_stream(self, speaker=None):
        clock = self
        return SimpleNamespace(accept=lambda pcm: None, resume=lambda: None, finish=lambda: "",
                               close=lambda: None, pause=lambda: clock.pauses.append(clock.packet))


class PassThrough:
    def decode(self, packet: bytes) -> bytes:
        return packet


def first_pause_after_the_last_word(vad, text: str, margin_db: float) -> float:
    """Milliseconds from the end of the packet holding the last voiced sample to the end of the packet at
    which the recogniser was told of a pause (the 180 ms a person holds the button after it included)."""
    from tests.support.spoken import spoken_pcm

    pcm = spoken_pcm(text, 16000, lead_ms=1200, tail_ms=600)
    speech = np.frombuffer(pcm, dtype="<i2")
    end = int(np.nonzero(np.abs(speech.astype(np.int32)) > 500)[0][-1]) // PACKET_SAMPLES
    keep = (end + 1) * PACKET_SAMPLES + 180 * 16
    loud = speech[:keep].astype(np.float64)
    noise_rms = np.sqrt(np.mean(loud[np.abs(loud) > 500] ** 2)) / 10 ** (30 / 20)
    noisy = np.clip(loud + np.random.default_rng(7).normal(0, noise_rms, keep), -32768, 32767).astype("<i2")
    clock = PauseClock()
    uplink = Uplink(SimpleNamespace(vad=vad, asr=clock), VadConfig(quiet_margin_db=margin_db), PassThrough(),
                    16000, ListenMode.MANUAL)
    try:
        for clock.packet in range(len(noisy) // PACKET_SAMPLES):
            start = clock.packet * PACKET_SAMPLES
            uplink.feed_run([noisy[start : start + PACKET_SAMPLES].tobytes()])
    finally:
        uplink.close()
    after = [p for p in clock.pauses if p >= end]
    return (after[0] - end) * PACKET_SAMPLES / 16 if after else float("inf")


@pytest.fixture(scope="module")
def silero():
    from wren.speech.vad import load_vad

    return load_vad(VadConfig(engine="silero"))


@pytest.mark.parametrize("text", ["How are you today", "What day is it today"])
def test_push_to_talk_tells_the_recogniser_of_the_pause_within_a_packet_of_the_last_word(silero, text):
    by_level = first_pause_after_the_last_word(silero, text, margin_db=3.0)
    by_vad = first_pause_after_the_last_word(silero, text, margin_db=0.0)
    assert by_level <= 60
    assert by_vad > by_level  # what the level buys: the guess starts that much earlier
