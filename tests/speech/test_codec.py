from __future__ import annotations

import numpy as np
import opuslib_next
import pytest
from wren.speech.codec import (
    CodecError,
    FrameChunker,
    OpusDecoder,
    OpusEncoder,
    PcmDecoder,
    PcmEncoder,
    encode_stream,
    frame_samples,
    make_decoder,
    make_encoder,
)

from tests.speech.conftest import spoken


def _correlation(a: bytes, b: bytes, max_lag: int) -> float:
    """Best normalised correlation of b against a over lags 0..max_lag (the codec delays its output)."""
    x = np.frombuffer(a, dtype="<i2").astype(np.float64)
    y = np.frombuffer(b, dtype="<i2").astype(np.float64)
    best = 0.0
    for lag in range(0, max_lag + 1, 4):
        n = min(len(x), len(y) - lag)
        xs, ys = x[:n], y[lag : lag + n]
        best = max(best, float(np.dot(xs, ys) / (np.linalg.norm(xs) * np.linalg.norm(ys) + 1e-9)))
    return best


@pytest.mark.parametrize("sample_rate", [16000, 24000])
@pytest.mark.parametrize("frame_ms", [20, 40, 60, 120])
def test_opus_round_trip_keeps_speech_and_frame_length(sample_rate, frame_ms):
    pcm = spoken("Turn on the kitchen light.", sample_rate)
    encoder = OpusEncoder(sample_rate, frame_ms, 24000)
    decoder = OpusDecoder(sample_rate, 1, frame_ms)
    assert encoder.frame_samples == sample_rate * frame_ms // 1000

    packets = list(encode_stream(encoder, pcm))
    decoded = [decoder.decode(p) for p in packets]

    assert len(packets) == -(-len(pcm) // encoder.frame_bytes)  # last frame padded, never dropped
    assert all(len(d) == encoder.frame_bytes for d in decoded)
    # 24 kbps keeps the speech: the decoded waveform follows the original closely.
    assert _correlation(pcm, b"".join(decoded), max_lag=sample_rate // 100) > 0.8
    # and the bitrate setting took effect (≈24 kbps, far below the 48 kbps libopus default at 24 kHz)
    kbps = sum(len(p) for p in packets) * 8 / (len(packets) * frame_ms / 1000) / 1000
    assert 12 < kbps < 32


def test_frame_size_follows_rate_and_duration_never_960():
    assert OpusEncoder(24000, 60).frame_samples == 1440
    assert OpusEncoder(16000, 60).frame_samples == 960
    assert OpusEncoder(16000, 20).frame_bytes == 640
    assert frame_samples(24000, 40) == 960


def test_encoder_rejects_a_partial_frame():
    encoder = OpusEncoder(24000, 60)
    with pytest.raises(CodecError, match="exactly 2880 bytes"):
        encoder.encode(bytes(100))


def test_decoder_accepts_tiny_dtx_packets_and_empty_loss_packets():
    # A device encoder with DTX on (as ESP32 firmware runs it) sends 1-2 byte packets during silence.
    device = opuslib_next.Encoder(16000, 1, opuslib_next.APPLICATION_VOIP)
    device.dtx = 1
    silence_packets = [device.encode(bytes(1920), 960) for _ in range(20)]
    assert min(len(p) for p in silence_packets) <= 2
    decoder = OpusDecoder(16000, 1, 60)
    for packet in silence_packets:
        assert len(decoder.decode(packet)) == 1920
    assert decoder.decode(b"\xf8") != b""  # a 1-byte CELT DTX frame (20 ms)
    assert len(decoder.decode(b"")) == 1920  # a lost packet is concealed as one frame


def test_corrupt_opus_packet_raises_codec_error_and_decoder_keeps_working():
    decoder = OpusDecoder(16000, 1, 60)
    good = next(iter(encode_stream(OpusEncoder(16000, 60), spoken("hello", 16000)[:1920])))
    # TOC code 3 (arbitrary frame count) with a frame count of 0 is invalid per RFC 6716.
    with pytest.raises(CodecError, match="corrupt Opus packet"):
        decoder.decode(bytes([0x03, 0x00]))
    with pytest.raises(CodecError):
        decoder.decode(bytes([0xFF, 0xFF]) + bytes(3))  # 48 frames of 20 ms: longer than 120 ms
    assert len(decoder.decode(good)) == 1920


def test_pcm_codec_passes_audio_through_with_the_same_interface():
    pcm = spoken("hello", 16000)
    encoder = make_encoder("pcm", 16000, 60)
    decoder = make_decoder("pcm", 16000, 1, 60)
    assert isinstance(encoder, PcmEncoder) and isinstance(decoder, PcmDecoder)
    packets = list(encode_stream(encoder, pcm))
    assert all(len(p) == 1920 for p in packets)
    assert b"".join(decoder.decode(p) for p in packets)[: len(pcm)] == pcm
    with pytest.raises(CodecError, match="whole int16 samples"):
        decoder.decode(b"\x01\x02\x03")


def test_stereo_pcm_is_mixed_to_mono():
    left_right = np.array([[1000, 3000], [-2000, 0]], dtype="<i2").tobytes()
    assert np.frombuffer(PcmDecoder(16000, 2).decode(left_right), "<i2").tolist() == [2000, -1000]


def test_factories_pick_codec_and_reject_unknown_parameters():
    assert isinstance(make_decoder("opus", 24000, 1, 60), OpusDecoder)
    assert isinstance(make_encoder("OPUS", 24000, 60, 24000), OpusEncoder)
    with pytest.raises(CodecError, match="unsupported audio format"):
        make_decoder("mp3", 16000)
    with pytest.raises(CodecError, match="22050 Hz"):
        OpusDecoder(22050)
    with pytest.raises(CodecError, match="frame duration"):
        OpusEncoder(16000, 30)


def test_encode_stream_accepts_chunks_of_any_length_and_pads_the_tail():
    encoder = PcmEncoder(16000, 20)
    chunks = [b"\x01\x00" * 7, b"\x02\x00" * 500, b"\x03\x00" * 3]
    frames = list(encode_stream(encoder, iter(chunks)))
    assert [len(f) for f in frames] == [640, 640]
    joined = b"".join(frames)
    assert joined[: 2 * 510] == b"".join(chunks) and joined[2 * 510 :] == bytes(640 * 2 - 2 * 510)


def test_frame_chunker_keeps_the_remainder_between_feeds():
    chunker = FrameChunker(4)
    assert chunker.feed(b"abc") == []
    assert chunker.feed(b"defghi") == [b"abcd", b"efgh"]
    assert chunker.pending_bytes == 1
    assert chunker.flush() == [b"i\x00\x00\x00"]


def test_opus_decode_keeps_the_gil_so_the_event_loop_never_waits_to_get_it_back():
    """The uplink decodes on the event loop: a call that released the GIL could hand it to a busy thread."""
    import ctypes

    from wren.speech import codec

    assert codec._libopus_decode._flags_ & ctypes._FUNCFLAG_PYTHONAPI  # a ctypes.PyDLL function
    decoder = OpusDecoder(16000, 1, 60)
    packet = OpusEncoder(16000, 60).encode(spoken("hello")[: 960 * 2])
    assert len(decoder.decode(packet)) == 960 * 2
