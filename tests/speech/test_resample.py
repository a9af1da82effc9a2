from __future__ import annotations

import numpy as np
import pytest
from wren.speech.resample import Resampler, resample_all


def _tone(freq: float, rate: int, seconds: float) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    return (np.sin(2 * np.pi * freq * t) * 12000).astype("<i2").tobytes()


def _dominant_frequency(pcm: bytes, rate: int) -> float:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.argmax(spectrum) * rate / len(samples))


@pytest.mark.parametrize(("src", "dst"), [(24000, 16000), (22050, 24000), (16000, 48000), (48000, 16000)])
def test_streaming_resampler_output_length_and_pitch_match_the_new_rate(src, dst):
    pcm = _tone(440, src, 1.0)
    resampler = Resampler(src, dst)
    out = b""
    for i in range(0, len(pcm), 2 * 1037):  # odd chunk sizes, as network frames arrive
        out += resampler.process(pcm[i : i + 2 * 1037])
    out += resampler.flush()
    assert abs(len(out) // 2 - dst) <= 2
    assert _dominant_frequency(out, dst) == pytest.approx(440, abs=3)


def test_equal_rates_pass_audio_through_untouched():
    pcm = _tone(300, 16000, 0.1)
    resampler = Resampler(16000, 16000)
    assert resampler.passthrough
    assert resampler.process(pcm) == pcm and resampler.flush() == b""


def test_chunk_split_inside_a_sample_loses_nothing():
    pcm = _tone(440, 16000, 0.2)
    resampler = Resampler(16000, 16000)
    assert resampler.process(pcm[:101]) + resampler.process(pcm[101:]) == pcm


def test_flush_readies_the_resampler_for_a_new_stream():
    resampler = Resampler(24000, 16000)
    first = resampler.process(_tone(440, 24000, 0.5)) + resampler.flush()
    second = resampler.process(_tone(440, 24000, 0.5)) + resampler.flush()
    assert len(first) == len(second) == 2 * 8000


def test_resample_all_converts_a_whole_buffer():
    assert len(resample_all(_tone(200, 22050, 1.0), 22050, 16000)) == 2 * 16000
