"""Memory discipline: the real audio task bodies (wren_device.audio_tasks.mic_task, the channel's receive
loop, audio_tasks.speaker_task) run inside a running asyncio loop for 40 frames under
micropython.heap_lock() (any allocation raises), as MicroPython's own extmod asyncio_heaplock test runs its
scheduler: mic -> codec -> framing -> `await ws.send_binary()` -> an echoing socket -> ws.pump() ->
Downlink.feed -> [Opus packet ring -> decode] -> PCM ring -> gain -> speaker. PCM on the stock build, Opus
(packets of varying length) on the Wren build; binary protocol v1, v2 and v3."""

from __future__ import annotations

import re
import wave
from pathlib import Path

import numpy as np
import pytest

from tests.firmware.conftest import FROZEN_ONLY, SCRIPTS, micropython
from tests.support.spoken import spoken_pcm, write_wav

FRAMES, SAMPLES, PREBUFFER = 40, 960, 6
SCRIPT = str(SCRIPTS / "heaplock_frames.py")


def expected_playback(pcm: np.ndarray, volume: int) -> np.ndarray:
    gain = 0 if volume <= 0 else 4096 if volume >= 100 else volume * volume * 4096 // 10000
    return np.clip((pcm.astype(np.int64) * gain) >> 12, -32768, 32767).astype(np.int16)


def played(out: Path) -> np.ndarray:
    with wave.open(str(out)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")


def locked_counts(log: str) -> dict[str, int]:
    m = re.search(r"LOCKED SENT (\d+) RECEIVED (\d+) PLAYED (\d+) ALIVE \[True, True, True\] BAD (\d+) "
                  r"DROPPED (\d+) LENGTHS (\d+)", log)
    assert m and "HEAPLOCK-OK" in log, log
    return dict(zip(("sent", "received", "played", "bad", "dropped", "lengths"), map(int, m.groups()),
                    strict=True))


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_the_pcm_audio_tasks_allocate_nothing_in_the_running_loop(tmp_path: Path, version: int) -> None:
    rng = np.random.default_rng(7)
    # A tone plus noise with full-scale peaks, shorter than the run so the end-of-file path runs too.
    t = np.arange(SAMPLES * 30)
    pcm = (20000 * np.sin(t * 0.05) + rng.normal(0, 3000, t.size)).clip(-32768, 32767).astype(np.int16)
    pcm[100], pcm[101] = 32767, -32768
    mic = write_wav(tmp_path / "mic.wav", pcm.tobytes(), 16000)
    out = tmp_path / "out.wav"
    async with micropython(SCRIPT, str(mic), str(out), str(version), "50", "pcm") as mp:
        assert await mp.finish(60) == 0, mp.output()
    counts = locked_counts(mp.output())
    assert counts["bad"] == counts["dropped"] == 0
    # The speaker played the server's pre-buffer (silence), then everything the mic heard, in order,
    # through framing, masking, the receive parser, the ring and the volume gain; silence after the file.
    got = played(out)
    assert np.all(got[: PREBUFFER * SAMPLES] == 0)
    heard = got[PREBUFFER * SAMPLES :]
    want = np.concatenate([expected_playback(pcm, 50), np.zeros(max(0, heard.size - pcm.size), np.int16)])
    assert heard.size >= 30 * SAMPLES, heard.size
    assert np.array_equal(heard, want[: heard.size])


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_the_opus_audio_tasks_allocate_nothing_whatever_the_packet_lengths(
    opus_build: Path, tmp_path: Path, version: int
) -> None:
    mic = write_wav(tmp_path / "mic.wav", spoken_pcm("what time is it"), 16000)
    out = tmp_path / "out.wav"
    async with micropython(SCRIPT, str(mic), str(out), str(version), "100", "opus", binary=opus_build,
                           path=FROZEN_ONLY) as mp:  # the frozen app; the script itself from the tests
        assert await mp.finish(60) == 0, mp.output()
    counts = locked_counts(mp.output())
    assert counts["bad"] == counts["dropped"] == 0
    assert counts["lengths"] >= 10, counts  # many packet lengths went through the same buffers
    got = played(out)
    assert np.abs(got).max() > 1000  # the speech came back out of the decoder
