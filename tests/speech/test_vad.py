from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.speech.conftest import spoken

SPEECH = "What is the weather like today in the city?"


def _noise(seconds: float, amplitude: float, seed: int = 1) -> bytes:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(16000 * seconds)) * amplitude).astype("<i2").tobytes()


def _probabilities_in_60ms_frames(stream, pcm: bytes) -> list[float]:
    out: list[float] = []
    for i in range(0, len(pcm), 1920):
        out += stream.process(pcm[i : i + 1920])
    return out


@pytest.mark.parametrize("vad_name", ["silero_vad", "webrtc_vad"])
def test_vad_finds_speech_in_a_spoken_sentence(vad_name, request):
    model = request.getfixturevalue(vad_name)
    stream = model.new_stream()
    pcm = spoken(SPEECH)  # 300 ms silence, speech, 300 ms silence
    probabilities = _probabilities_in_60ms_frames(stream, pcm)
    assert len(probabilities) == len(pcm) // 2 // (16000 * stream.window_ms // 1000)
    speech_windows = sum(p >= 0.5 for p in probabilities)
    speech_ms = speech_windows * stream.window_ms
    assert speech_ms > 1000  # the sentence lasts ≈2.5 s
    lead = 200 // stream.window_ms  # the leading silence is not speech
    assert max(probabilities[:lead]) < 0.5
    stream.close()


@pytest.mark.parametrize("vad_name", ["silero_vad", "webrtc_vad"])
def test_vad_finds_no_speech_in_silence_or_low_noise(vad_name, request):
    model = request.getfixturevalue(vad_name)
    for signal in (bytes(32000), _noise(2.0, amplitude=60), _noise(2.0, amplitude=200, seed=2)):
        stream = (
            model.new_stream()
        )  # a fresh stream each time, as a mic's noise floor is there from the start
        assert max(_probabilities_in_60ms_frames(stream, signal)) < 0.5  # hiss at ≈ -55 and -45 dBFS
        stream.close()


def test_silero_windows_are_32ms_and_partial_windows_wait_for_more_audio(silero_vad):
    stream = silero_vad.new_stream()
    assert stream.window_ms == 32
    assert stream.process(bytes(1000)) == []  # < 1024 bytes: buffered
    assert len(stream.process(bytes(1100))) == 2  # 2100 bytes buffered → two windows, 52 bytes left
    stream.close()


def test_webrtc_gives_hard_zero_or_one(webrtc_vad):
    stream = webrtc_vad.new_stream()
    probabilities = _probabilities_in_60ms_frames(stream, spoken(SPEECH))
    assert stream.window_ms == 30
    assert set(probabilities) == {0.0, 1.0}


def test_silero_streams_keep_separate_state_while_sharing_the_model(silero_vad):
    """Interleaving two streams gives each the same result as running it alone: state is per stream."""
    speech = spoken(SPEECH)
    alone = _probabilities_in_60ms_frames(silero_vad.new_stream(), speech)
    a, b = silero_vad.new_stream(), silero_vad.new_stream()
    together_a: list[float] = []
    noise = _noise(len(speech) / 32000, amplitude=3000, seed=7)
    for i in range(0, len(speech), 1920):
        together_a += a.process(speech[i : i + 1920])
        b.process(noise[i : i + 1920])
    assert np.allclose(together_a, alone, atol=1e-4)
    a.close()
    b.close()


def test_a_closed_silero_stream_refuses_audio_and_a_new_one_starts_clean(silero_vad):
    speech_stream = silero_vad.new_stream()
    speech_stream.process(spoken(SPEECH)[:32000])
    speech_stream.close()
    with pytest.raises(RuntimeError, match="after close"):
        speech_stream.process(bytes(1024))
    fresh = silero_vad.new_stream()  # silence right after a closed speech stream reads as silence
    assert max(fresh.process(bytes(3200))) < 0.5
    fresh.close()


def test_reset_forgets_speech_state(silero_vad):
    stream = silero_vad.new_stream()
    stream.process(spoken(SPEECH)[:32000])
    stream.reset()
    assert max(stream.process(bytes(3200))) < 0.5
    stream.close()


def test_silero_runs_one_thread_per_call_and_adds_no_thread_pool():
    """A 512-sample window is too small to split across threads (pysilero's 4-thread OpenMP team made each
    window cost ≈2.4 ms on a 2-core box): the shared ONNX session is single-threaded. Checked in a fresh
    interpreter: scoring windows starts no new threads."""
    code = (
        "import os\n"
        "from wren.config import VadConfig\n"
        "from wren.speech.vad import load_vad\n"
        "import numpy as np\n"
        "model = load_vad(VadConfig(engine='silero', energy_gate_dbfs=-200))\n"
        "before = len(os.listdir('/proc/self/task'))\n"
        "stream = model.new_stream()\n"
        "stream.process((np.random.default_rng(1).standard_normal(16000) * 3000).astype('<i2').tobytes())\n"
        "print(len(os.listdir('/proc/self/task')) - before, model.inferences)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", str(16000 // 512)]
