from __future__ import annotations

import os
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


def test_closed_silero_streams_return_their_context_for_reuse(silero_vad):
    streams = [silero_vad.new_stream() for _ in range(3)]
    idle_before_close = silero_vad.idle_contexts
    for stream in streams:
        stream.close()
    assert silero_vad.idle_contexts == idle_before_close + 3
    reused = silero_vad.new_stream()
    assert silero_vad.idle_contexts == idle_before_close + 2
    # a reused context starts clean: silence right after a closed speech stream reads as silence
    assert max(reused.process(bytes(3200))) < 0.5
    reused.close()
    with pytest.raises(RuntimeError, match="after close"):
        reused.process(bytes(1024))


def test_reset_forgets_speech_state(silero_vad):
    stream = silero_vad.new_stream()
    stream.process(spoken(SPEECH)[:32000])
    stream.reset()
    assert max(stream.process(bytes(3200))) < 0.5
    stream.close()


def test_silero_runs_single_threaded_and_leaves_the_environment_alone():
    """pysilero's OpenMP team of 4 threads made every 32 ms window cost ≈2.4 ms on a 2-core box; the model
    is imported single-threaded. Checked in a fresh interpreter, where the import really happens."""
    code = (
        "import os, numpy\n"
        "from wren.config import VadConfig\n"
        "from wren.speech.vad import load_vad\n"
        "before = len(os.listdir('/proc/self/task'))\n"
        "stream = load_vad(VadConfig(engine='silero')).new_stream()\n"
        "stream.process(bytes(1024 * 8))\n"
        "print(len(os.listdir('/proc/self/task')) - before, 'OMP_THREAD_LIMIT' in os.environ)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_THREAD_LIMIT"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "False"]
