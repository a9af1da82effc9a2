"""The simulated board over TLS: `wren serve` with a self-signed certificate, the board pinning it
(config.json "tls_ca"), OTA over https://, pairing, and a spoken turn over wss://. A board pinning another
certificate does not talk to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.firmware.conftest import FIRMWARE, micropython, write_config
from tests.firmware.test_pairing_sim import approve
from tests.support.certificates import self_signed
from tests.support.spoken import spoken_pcm, write_wav
from tests.support.wren_process import WrenProcess, wren_serve


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WrenProcess, Path, Path]]:
    data = tmp_path_factory.mktemp("wren-tls")
    cert, key = self_signed(tmp_path_factory.mktemp("cert"))
    env = {"WREN_AUTH_MODE": "pair", "WREN_TTS_NATURAL_VARIATION": "0", "WREN_SERVER_TLS_CERT": str(cert),
           "WREN_SERVER_TLS_KEY": str(key)}
    with wren_serve(data, env=env) as wren:
        yield wren, data, cert


def board_env(directory: Path, port: int, ca: Path) -> dict[str, str]:
    mic = write_wav(directory / "mic.wav", spoken_pcm("what time is it"), 16000)
    env = write_config(directory, listen_mode="auto", volume=100, tls_ca=str(ca),
                       ota_url=f"https://127.0.0.1:{port}/xiaozhi/ota/")
    env.update(WREN_SIM_MIC=str(mic), WREN_SIM_OUT=str(directory / "reply.wav"), WREN_SIM_BUTTON="press@0.5",
               WREN_SIM_TURNS="1")
    return env


async def test_a_board_pinning_the_certificate_pairs_and_talks_over_tls(tls_server, device_dir: Path) -> None:
    wren, data, cert = tls_server
    async with micropython(str(FIRMWARE / "main.py"), env=board_env(device_dir, wren.port, cert),
                           cwd=device_dir) as mp:
        code = (await mp.wait_for(r"pairing code (\d{6})", timeout=60)).group(1)
        assert approve(data, code).returncode == 0
        await mp.wait_for(r"ota: websocket url wss://", timeout=30)
        assert await mp.finish(120) == 0, mp.output()
    assert "] stt: " in mp.output() and "done; playback drained" in mp.output()


async def test_a_board_pinning_another_certificate_does_not_talk(tls_server, device_dir: Path,
                                                                  tmp_path: Path) -> None:
    wren, _, _ = tls_server
    other, _ = self_signed(tmp_path)
    async with micropython(str(FIRMWARE / "main.py"), env=board_env(device_dir, wren.port, other),
                           cwd=device_dir) as mp:
        await mp.wait_for(r"ota: attempt 1 failed", timeout=30)
    assert "pairing code" not in mp.output()
