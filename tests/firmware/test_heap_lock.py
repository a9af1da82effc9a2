"""Memory discipline: the per-frame audio steps run under micropython.heap_lock() (any allocation raises)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from tests.firmware.conftest import SCRIPTS, micropython
from tests.support.spoken import write_wav

FRAMES, SAMPLES = 40, 960


def expected_playback(pcm: np.ndarray, volume: int) -> np.ndarray:
    gain = 0 if volume <= 0 else 4096 if volume >= 100 else volume * volume * 4096 // 10000
    return np.clip((pcm.astype(np.int64) * gain) >> 12, -32768, 32767).astype(np.int16)


@pytest.mark.parametrize("version", [1, 3])
async def test_mic_to_frame_and_frame_to_speaker_allocate_nothing(tmp_path: Path, version: int) -> None:
    rng = np.random.default_rng(7)
    # A tone plus noise with full-scale peaks, shorter than the run so the end-of-file path runs too.
    t = np.arange(SAMPLES * 30)
    pcm = (20000 * np.sin(t * 0.05) + rng.normal(0, 3000, t.size)).clip(-32768, 32767).astype(np.int16)
    pcm[100], pcm[101] = 32767, -32768
    mic = write_wav(tmp_path / "mic.wav", pcm.tobytes(), 16000)
    out = tmp_path / "out.wav"
    script = str(SCRIPTS / "heaplock_frames.py")
    async with micropython(script, str(mic), str(out), str(version), "50") as mp:
        assert await mp.finish(60) == 0, mp.output()
    assert "HEAPLOCK-OK" in mp.output()
    with wave.open(str(out)) as w:
        played = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    # Everything the mic heard came back through framing, masking, gain and the jitter ring unchanged
    # except for the volume; after the end of the file the mic delivers silence.
    expected = np.concatenate([expected_playback(pcm, 50), np.zeros(FRAMES * SAMPLES - pcm.size, np.int16)])
    assert played.size == FRAMES * SAMPLES
    assert np.array_equal(played, expected)
