"""The simulated board pairs the way a stock xiaozhi device does: against a real `wren serve` in auth mode
`pair` (the default) it shows its code (here without its digit sounds, which only logs), the owner
approves it with `wren devices approve`, and the same boot goes on to a spoken turn with the token OTA
then hands it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.firmware.conftest import FIRMWARE, micropython, write_config
from tests.support.spoken import spoken_pcm, write_wav
from tests.support.wren_process import REPO, WrenProcess, wren_serve


@pytest.fixture(scope="module")
def pairing_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WrenProcess, Path]]:
    data = tmp_path_factory.mktemp("wren-pairing")
    with wren_serve(data, env={"WREN_AUTH_MODE": "pair", "WREN_TTS_NATURAL_VARIATION": "0"}) as wren:
        yield wren, data


def approve(data: Path, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WREN_")}
    env.update(WREN_SERVER_DATA_DIR=str(data), WREN_AUTH_MODE="pair")
    return subprocess.run([sys.executable, "-m", "wren.cli", "devices", "approve", code], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


async def test_a_new_board_shows_its_code_is_approved_and_then_talks(pairing_server,
                                                                     device_dir: Path) -> None:
    wren, data = pairing_server
    mic = write_wav(device_dir / "mic.wav", spoken_pcm("what time is it"), 16000)
    env = write_config(device_dir, listen_mode="auto", volume=100,
                       ota_url=f"http://127.0.0.1:{wren.port}/xiaozhi/ota/")
    env.update(WREN_SIM_MIC=str(mic), WREN_SIM_OUT=str(device_dir / "reply.wav"), WREN_SIM_BUTTON="press@0.5",
               WREN_SIM_TURNS="1")
    async with micropython(str(FIRMWARE / "main.py"), env=env, cwd=device_dir) as mp:
        code = (await mp.wait_for(r"pairing code (\d{6})", timeout=60)).group(1)
        assert "asks to pair: code " + code in wren.log_text()
        await mp.wait_for(rf"\] display: Pairing code {code[:3]} {code[3:]}", timeout=10)
        # No sounds here (WREN_SIM_SOUNDS unset, none in the working directory): it only says so.
        await mp.wait_for(r"pairing: no digit sounds at digits.wdg", timeout=10)
        approved = approve(data, code)
        assert approved.returncode == 0, approved.stderr
        await mp.wait_for(r"ota: paired", timeout=30)
        assert await mp.finish(120) == 0, mp.output()
    log = mp.output()
    assert "] stt: " in log and "done; playback drained" in log
    assert "paired device" in wren.log_text()  # admitted by its pairing, not by an open door
