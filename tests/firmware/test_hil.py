"""Hardware-in-the-loop on the host: the real `wren serve`, the unmodified firmware under MicroPython with
a 32-bit-sized heap, piper speech as the mic, pocketsphinx listening to what the simulated speaker played."""

from __future__ import annotations

import re
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.firmware.conftest import FIRMWARE, micropython, write_config
from tests.server.helpers import heard_a_time, recognise, words
from tests.support.spoken import spoken_pcm, write_wav
from tests.support.wren_process import wren_serve

# The -X heapsize (K words: ~KB on a 32-bit board) the full turns must pass with; the smallest that
# passes today is lower (docs/firmware.md, "Heap budget"), so this keeps a margin.
HEAP_BUDGET = "120wk"


@pytest.fixture(scope="module")
def wren_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    # A steady voice (no piper sampling noise) so recognising the reply WAV gives the same words every run.
    with wren_serve(tmp_path_factory.mktemp("wren-server"), env={"WREN_TTS_NATURAL_VARIATION": "0"}) as wren:
        yield wren.port, wren.log_path


async def run_turn(directory: Path, said: str, mode: str, heap: str = HEAP_BUDGET, **cfg: object) -> str:
    """One spoken turn through the simulated device; returns the firmware's log."""
    mic = write_wav(directory / "mic.wav", spoken_pcm(said), 16000)
    env = write_config(directory, listen_mode=mode, volume=100, **cfg)
    button = "press@0.5,release@eof" if mode == "manual" else "press@0.5"
    env.update(WREN_SIM_MIC=str(mic), WREN_SIM_OUT=str(directory / "reply.wav"), WREN_SIM_BUTTON=button,
               WREN_SIM_TURNS="1")
    async with micropython(str(FIRMWARE / "main.py"), env=env, cwd=directory, heap=heap) as mp:
        assert await mp.finish(120) == 0, mp.output()
    return mp.output()


def reply_words(directory: Path) -> set[str]:
    with wave.open(str(directory / "reply.wav")) as w:
        rate = w.getframerate()
        pcm = w.readframes(w.getnframes())
    assert np.abs(np.frombuffer(pcm, dtype="<i2")).max() > 1000, "the speaker played only silence"
    return words(recognise(pcm, rate))


def stt_words(log: str) -> set[str]:
    found = re.findall(r"\] stt: (.*)", log)
    assert len(found) == 1, log
    return words(found[0])


@pytest.mark.parametrize("mode", ["auto", "manual"])
async def test_spoken_question_gets_a_spoken_answer_through_the_simulated_device(
    wren_server: tuple[int, Path], device_dir: Path, mode: str
) -> None:
    port, _log = wren_server
    if mode == "auto":  # the boot-time OTA request hands the device its WebSocket URL
        log = await run_turn(device_dir, "what time is it", mode, ota_url=f"http://127.0.0.1:{port}/xiaozhi/ota/")
        assert f"ota: websocket url ws://127.0.0.1:{port}/xiaozhi/v1/" in log
    else:
        log = await run_turn(device_dir, "what time is it", mode, server_url=f"ws://127.0.0.1:{port}/xiaozhi/v1/")
    assert {"what", "time"} <= stt_words(log)
    assert heard_a_time(reply_words(device_dir))
    assert re.search(r"heap: high-water \d+ bytes", log)


async def test_spoken_volume_command_changes_the_device_volume_over_mcp_with_paged_tools(
    wren_server: tuple[int, Path], device_dir: Path
) -> None:
    port, _log = wren_server
    log = await run_turn(
        device_dir, "set the volume to thirty", "manual",
        server_url=f"ws://127.0.0.1:{port}/xiaozhi/v1/", test_extra_tools=20,
        heap="192wk",  # a test build: 20 filler tools and 8 KB tools/list pages need more room
    )
    pages = re.findall(r"mcp: tools/list id \d+ (\S*)", log)
    assert len(pages) >= 2 and pages[0] == "" and all(pages[1:]), log  # first page, then by cursor
    assert re.search(r"\] volume: 30$", log, re.MULTILINE), log
    said = " ".join(re.findall(r"\] tts: sentence_start (.*)", log))
    assert "volume" in said.lower() and "30" in said, said  # …and the reply says so
    assert "volume" in reply_words(device_dir)  # out loud, through the (now quieter) speaker
