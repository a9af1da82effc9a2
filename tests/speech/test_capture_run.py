"""`UtteranceCapture.process_run`: a run of packets fed in one call behaves exactly like packet by packet."""

from __future__ import annotations

from types import SimpleNamespace

from wren.config import VadConfig
from wren.session.capture import CaptureEvent, UtteranceCapture
from wren.session.state import ListenMode
from wren.speech.codec import CodecError, make_decoder, make_encoder

from tests.speech.conftest import spoken

FRAME_MS = 60
SAMPLES = 16000 * FRAME_MS // 1000


def _opus_packets(pcm: bytes) -> list[bytes]:
    encoder = make_encoder("opus", 16000, FRAME_MS)
    frame = SAMPLES * 2
    pcm += bytes(-len(pcm) % frame)
    return [encoder.encode(pcm[i : i + frame]) for i in range(0, len(pcm), frame)]


def _capture(silero_vad, pocketsphinx_engine) -> UtteranceCapture:
    speech = SimpleNamespace(vad=silero_vad, asr=pocketsphinx_engine)
    decoder = make_decoder("opus", 16000, 1, FRAME_MS)
    capture = UtteranceCapture(speech, VadConfig(), decoder, 16000, "kitchen")
    capture.begin(ListenMode.AUTO)
    return capture


def _events_one_by_one(capture: UtteranceCapture, packets: list[bytes]) -> list[tuple[int, CaptureEvent]]:
    seen = []
    for index, packet in enumerate(packets):
        seen.extend((index, event) for event in capture.process(packet))
    return seen


def _events_in_runs(capture: UtteranceCapture, packets: list[bytes]) -> tuple[list, int]:
    """Feed the whole rest of the stream as one run each time, as the session does; count the calls."""
    seen, fed, calls = [], 0, 0
    while fed < len(packets):
        outcomes = capture.process_run(packets[fed:])
        calls += 1
        assert outcomes, "a run always consumes at least one packet"
        for offset, outcome in enumerate(outcomes):
            seen.extend((fed + offset, event) for event in outcome)
        fed += len(outcomes)
    return seen, calls


def test_a_run_stops_after_each_event_and_yields_the_same_events_and_words(silero_vad, pocketsphinx_engine):
    packets = _opus_packets(spoken("what time is it", lead_ms=600, tail_ms=1500))
    single = _capture(silero_vad, pocketsphinx_engine)
    expected = _events_one_by_one(single, packets)
    expected_text = single.finish().text
    assert [event for _, event in expected] == [CaptureEvent.ONSET, CaptureEvent.END]

    batched = _capture(silero_vad, pocketsphinx_engine)
    got, calls = _events_in_runs(batched, packets)
    assert got == expected  # same events, on the same packets
    assert calls == 3  # up to the onset, up to the end, the rest (ignored once ended)
    assert batched.finish().text == expected_text == "what time is it"


def test_a_bad_packet_in_a_run_is_reported_alone_and_the_run_goes_on(silero_vad, pocketsphinx_engine):
    capture = _capture(silero_vad, pocketsphinx_engine)
    good = _opus_packets(bytes(SAMPLES * 2 * 3))
    outcomes = capture.process_run([good[0], b"\xff" * 3, good[1], good[2]])
    assert len(outcomes) == 4
    assert isinstance(outcomes[1], CodecError)
    assert outcomes[0] == outcomes[2] == outcomes[3] == []
    capture.abandon()
