"""The Wren build (`make firmware-host`): the unix port with Wren's opus C module and the app frozen in.

The module round-trips a tone and speech at the device's settings (16 kHz mono, 60 ms, complexity 0),
its packets have the configured bitrate's size, and encode/decode (the module's and the firmware codec's
calls) run under micropython.heap_lock() frame after frame; then one hardware-in-the-loop turn of the
frozen app on that build against the real `wren serve`, with Opus both ways, in a 64 K-word heap.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.firmware.conftest import FROZEN_ONLY, REPO, micropython, write_config
from tests.firmware.test_hil import reply_words, stt_words
from tests.server.helpers import heard_a_time, recognise, words
from tests.support.spoken import spoken_pcm, write_wav
from tests.support.wren_process import wren_serve

FRAMES_SCRIPT = REPO / "tools" / "firmware" / "mpy_opus_frames.py"
# The Wren build's heap budget for a full turn (boot, OTA, connect, hello, device MCP, speech, the reply
# played out): 64 K words, about 64 KB on a 32-bit board. The smallest that passes is lower
# (docs/firmware.md, "Heap budget").
OPUS_HEAP_BUDGET = "64wk"
RATE, FRAME = 16000, 960  # the device's uplink: 60 ms at 16 kHz


def run_frames(binary: Path, tmp: Path, pcm: np.ndarray, rate: int = RATE, bitrate: int = 16000,
               vbr: bool = True, dtx: bool = True) -> tuple[np.ndarray, np.ndarray, str]:
    """pcm through the module frame by frame (under heap_lock) -> (decoded PCM, packet sizes, output)."""
    src, out = tmp / "in.pcm", tmp / "out.pcm"
    src.write_bytes(pcm.astype("<i2").tobytes())
    args = [str(a) for a in (src, out, rate, bitrate, int(vbr), int(dtx), 0)]
    env = {"PATH": os.environ.get("PATH", ""), "MICROPYPATH": FROZEN_ONLY}  # the frozen wren_device.codec
    res = subprocess.run([str(binary), str(FRAMES_SCRIPT), *args], capture_output=True, text=True,
                         timeout=120, cwd=tmp, env=env)
    assert res.returncode == 0 and "HEAPLOCK-OK" in res.stdout, res.stdout + res.stderr
    sizes = re.search(r"^SIZES (.*)$", res.stdout, re.MULTILINE)
    assert sizes, res.stdout
    return np.frombuffer(out.read_bytes(), "<i2"), np.array([int(n) for n in sizes[1].split()]), res.stdout


def aligned(sent: np.ndarray, got: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two signals lined up over the codec's delay (the best lag up to 60 ms), first 120 ms dropped."""
    n = min(sent.size, got.size)
    x, y = sent[:n].astype(float), got[:n].astype(float)
    lag = max(range(FRAME), key=lambda k: float(np.dot(x[: n - k], y[k:])))
    return x[: n - lag][2 * FRAME :], y[lag:][2 * FRAME :]


def snr_db(x: np.ndarray, y: np.ndarray) -> float:
    return float(10 * np.log10(np.sum(x * x) / np.sum((x - y) ** 2)))


def tone(seconds: float = 3.0) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return 10000 * np.sin(2 * np.pi * 440 * t) + 3000 * np.sin(2 * np.pi * 1250 * t)


def test_a_tone_survives_the_round_trip(opus_build: Path, tmp_path: Path) -> None:
    sent = tone()
    got, sizes, out = run_frames(opus_build, tmp_path, sent, dtx=False)
    assert got.size == sizes.size * FRAME == sent.size  # every 60 ms frame decoded to 960 samples
    x, y = aligned(sent, got)
    assert snr_db(x, y) > 8, snr_db(x, y)  # measured: 12 dB at 16 kbit/s
    assert np.corrcoef(x, y)[0, 1] > 0.95
    assert re.search(r"^STATE \d+ \d+ libopus 1\.5\.2-fixed$", out, re.MULTILINE), out  # fixed point


def test_speech_survives_the_round_trip_and_is_still_understood(opus_build: Path, tmp_path: Path) -> None:
    sent = np.frombuffer(spoken_pcm("what time is it"), "<i2")
    got, sizes, _ = run_frames(opus_build, tmp_path, sent)  # the device's settings: 16 kbit/s VBR, DTX
    x, y = aligned(sent, got)
    assert np.corrcoef(x, y)[0, 1] > 0.85  # measured: 0.93
    assert {"what", "time"} <= words(recognise(got.astype("<i2").tobytes(), RATE))
    # VBR around the configured 16 kbit/s (120 bytes a frame) while speaking; DTX: 1-byte packets in silence.
    rms = np.sqrt((sent[: sizes.size * FRAME].astype(float).reshape(-1, FRAME) ** 2).mean(axis=1))
    speaking = sizes[rms > 0.1 * rms.max()]
    assert speaking.size >= 10 and 0.8 * 120 < speaking.mean() < 1.25 * 120, (sizes, rms.astype(int))
    assert (sizes == 1).sum() >= 3, sizes


@pytest.mark.parametrize("bitrate", [16000, 24000, 32000])
def test_cbr_packets_have_exactly_the_configured_bitrate(
    opus_build: Path, tmp_path: Path, bitrate: int
) -> None:
    _, sizes, _ = run_frames(opus_build, tmp_path, tone(1.2), bitrate=bitrate, vbr=False, dtx=False)
    assert set(sizes.tolist()) == {bitrate * 60 // 8000}  # 120, 180, 240 bytes per 60 ms


def test_the_downlink_rate_decodes_allocation_free_too(opus_build: Path, tmp_path: Path) -> None:
    # The Wren server's Opus replies are 24 kHz (xiaozhi's default): 1440 samples a frame.
    t = np.arange(30 * 1440) / 24000
    sent = 10000 * np.sin(2 * np.pi * 330 * t)
    got, sizes, _ = run_frames(opus_build, tmp_path, sent, rate=24000, bitrate=24000, dtx=False)
    assert got.size == sizes.size * 1440 == sent.size
    x, y = aligned(sent, got)
    assert np.corrcoef(x, y)[0, 1] > 0.95


@pytest.fixture(scope="module")
def wren_server(tmp_path_factory: pytest.TempPathFactory):
    # Like test_hil's: a steady voice, so recognising the reply gives the same words every run.
    with wren_serve(tmp_path_factory.mktemp("wren-server"), env={"WREN_TTS_NATURAL_VARIATION": "0"}) as wren:
        yield wren.port, wren.log_path


async def test_a_spoken_turn_on_the_opus_build_against_the_real_server(
    opus_build: Path, wren_server: tuple[int, Path], device_dir: Path
) -> None:
    port, server_log = wren_server
    mic = write_wav(device_dir / "mic.wav", spoken_pcm("what time is it"), RATE)
    # No max_downlink_rate: an Opus board accepts the server's 24 kHz replies by default.
    env = write_config(device_dir, listen_mode="auto", volume=100, ota_url=f"http://127.0.0.1:{port}/xiaozhi/ota/")
    env.update(WREN_SIM_MIC=str(mic), WREN_SIM_OUT=str(device_dir / "reply.wav"), WREN_SIM_BUTTON="press@0.5",
               WREN_SIM_TURNS="1")
    # The frozen main.py, from a directory with nothing to import: all of the app comes from the image.
    async with micropython("-m", "main", env=env, cwd=device_dir, heap=OPUS_HEAP_BUDGET, binary=opus_build,
                           path=FROZEN_ONLY) as mp:
        assert await mp.finish(120) == 0, mp.output()
    log = mp.output()
    assert "device: ready: mode auto, codec opus" in log, log
    assert "MemoryError" not in log, log  # nothing failed for lack of heap, not even one frame
    assert "clock: server time " in log  # the OTA reply's server_time reached the board
    assert "mcp: initialize" in log and "mcp: tools/list" in log  # the device MCP exchange ran
    assert re.search(r"turn: done; playback drained \(\d+ frames, 0 dropped\)", log), log
    assert f"ota: websocket url ws://127.0.0.1:{port}/xiaozhi/v1/" in log
    assert {"what", "time"} <= stt_words(log)  # the server understood the device's Opus
    assert heard_a_time(reply_words(device_dir))  # and the device decoded the server's Opus reply
    assert re.search(r"heap: high-water \d+ bytes", log)
    assert re.search(r"hello \(protocol v1, uplink opus 16000 Hz/60 ms, downlink opus 24000 Hz/60 ms\)",
                     Path(server_log).read_text()), Path(server_log).read_text()[-3000:]


async def _opus_turn(opus_build: Path, device_dir: Path, port: int, said: str, mode: str, button: str,
                     **cfg: object) -> str:
    mic = write_wav(device_dir / "mic.wav", spoken_pcm(said), RATE)
    url = f"ws://127.0.0.1:{port}/xiaozhi/v1/"
    env = write_config(device_dir, listen_mode=mode, volume=100, server_url=url, **cfg)
    env.update(WREN_SIM_MIC=str(mic), WREN_SIM_OUT=str(device_dir / "reply.wav"), WREN_SIM_BUTTON=button,
               WREN_SIM_TURNS="1")
    async with micropython("-m", "main", env=env, cwd=device_dir, heap=OPUS_HEAP_BUDGET, binary=opus_build,
                           path=FROZEN_ONLY) as mp:
        assert await mp.finish(120) == 0, mp.output()
    return mp.output()


async def test_volume_by_voice_on_the_opus_build(
    opus_build: Path, wren_server: tuple[int, Path], device_dir: Path
) -> None:
    port, _ = wren_server
    log = await _opus_turn(opus_build, device_dir, port, "set the volume to thirty", "manual",
                           "press@0.5,release@eof")
    assert "codec opus" in log and "MemoryError" not in log, log
    assert re.search(r"\] volume: 30$", log, re.MULTILINE), log  # the server called the device's MCP tool
    said = " ".join(re.findall(r"\] tts: sentence_start (.*)", log))
    assert "volume" in said.lower() and "30" in said, said


async def test_the_button_aborts_a_reply_on_the_opus_build(
    opus_build: Path, wren_server: tuple[int, Path], device_dir: Path
) -> None:
    port, server_log = wren_server
    # "what can you do" has a long answer: the second press lands while it plays.
    log = await _opus_turn(opus_build, device_dir, port, "what can you do", "auto", "press@0.5,press@7")
    assert "codec opus" in log and "MemoryError" not in log, log
    assert "state: speaking ->" in log and "tts: stop" in log, log  # the server answered the abort
    served = Path(server_log).read_text()
    assert re.search(r": abort \(button\)", served), served[-2000:]
