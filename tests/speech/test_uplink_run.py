"""`Uplink.feed_run`: a run of packets fed in one call behaves exactly like packet by packet (real models)."""

from __future__ import annotations

from types import SimpleNamespace

from wren.config import VadConfig
from wren.pipeline.frames import SpeechOnset, StageError, Utterance
from wren.pipeline.turn_detection import ListenMode
from wren.pipeline.uplink import Uplink
from wren.speech.codec import CodecError, make_decoder, make_encoder

from tests.speech.conftest import spoken

FRAME_MS = 60
SAMPLES = 16000 * FRAME_MS // 1000


def _opus_packets(pcm: bytes) -> list[bytes]:
    encoder = make_encoder("opus", 16000, FRAME_MS)
    frame = SAMPLES * 2
    pcm += bytes(-len(pcm) % frame)
    return [encoder.encode(pcm[i : i + frame]) for i in range(0, len(pcm), frame)]


def _uplink(silero_vad, pocketsphinx_engine) -> Uplink:
    speech = SimpleNamespace(vad=silero_vad, asr=pocketsphinx_engine)
    decoder = make_decoder("opus", 16000, 1, FRAME_MS)
    return Uplink(speech, VadConfig(), decoder, 16000, ListenMode.AUTO, "kitchen")


def _events_one_by_one(uplink: Uplink, packets: list[bytes]) -> list[tuple[int, object]]:
    seen = []
    for index, packet in enumerate(packets):
        seen.extend((index, frame) for frame in uplink.feed_run([packet])[0])
    return seen


def _events_in_runs(uplink: Uplink, packets: list[bytes]) -> tuple[list, int]:
    """Feed the whole rest of the stream as one run each time, as the session does; count the calls."""
    seen, fed, calls = [], 0, 0
    while fed < len(packets):
        outcomes = uplink.feed_run(packets[fed:])
        calls += 1
        assert outcomes, "a run always consumes at least one packet"
        for offset, frames in enumerate(outcomes):
            seen.extend((fed + offset, frame) for frame in frames)
        fed += len(outcomes)
    return seen, calls


def _shape(events: list[tuple[int, object]]) -> list[tuple[int, str, str]]:
    return [(i, type(f).__name__, getattr(f, "text", "")) for i, f in events]


def test_a_run_stops_after_each_event_and_yields_the_same_events_and_words(silero_vad, pocketsphinx_engine):
    packets = _opus_packets(spoken("what time is it", lead_ms=600, tail_ms=1500))
    single = _uplink(silero_vad, pocketsphinx_engine)
    expected = _events_one_by_one(single, packets)
    single.close()
    assert [type(f) for _, f in expected] == [SpeechOnset, Utterance]
    assert expected[1][1].text == "what time is it"

    batched = _uplink(silero_vad, pocketsphinx_engine)
    got, calls = _events_in_runs(batched, packets)
    batched.close()
    assert _shape(got) == _shape(expected)  # same events, on the same packets, same words
    assert calls == 3  # up to the onset, up to the end of the utterance, the rest (ignored once ended)


def test_a_bad_packet_in_a_run_is_reported_alone_and_the_run_goes_on(silero_vad, pocketsphinx_engine):
    uplink = _uplink(silero_vad, pocketsphinx_engine)
    good = _opus_packets(bytes(SAMPLES * 2 * 3))
    outcomes = uplink.feed_run([good[0], b"\xff" * 3, good[1], good[2]])
    assert len(outcomes) == 4
    assert [type(f) for f in outcomes[1]] == [StageError]
    assert isinstance(outcomes[1][0].error, CodecError)
    assert outcomes[0] == outcomes[2] == outcomes[3] == []
    uplink.close()
