"""`make flash` / `make deploy` print what they run and fail clearly when no board is attached;
`make sim` refuses to start without a mic WAV; `make firmware` without ESP-IDF says what it needs."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.firmware.conftest import REPO


def make(*args: str) -> subprocess.CompletedProcess[str]:
    # STAMP= skips the venv refresh prerequisite: the venv is already installed for the tests.
    return subprocess.run(
        ["make", "--no-print-directory", *args, "STAMP="],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_flash_without_a_board_names_the_port_and_the_esptool_command(tmp_path: Path) -> None:
    image = tmp_path / "micropython.bin"
    image.write_bytes(b"\xe9" + bytes(1023))
    for board in ("esp32s3", "esp32"):
        res = make("flash", "PORT=/dev/ttyWREN-NOPE", f"BOARD={board}", f"FIRMWARE={image}")
        assert res.returncode != 0
        assert f"esptool --chip {board} --port /dev/ttyWREN-NOPE erase-flash" in res.stdout
        assert "flash: esptool cannot find or talk to the board on /dev/ttyWREN-NOPE" in res.stderr
        assert "write-flash" not in res.stdout  # stopped at the first failure


def test_flash_writes_at_the_chip_offset(tmp_path: Path) -> None:
    image = tmp_path / "micropython.bin"
    image.write_bytes(b"\xe9" + bytes(1023))
    # --no-erase goes straight to write-flash, so the printed command shows the offset for each chip.
    for board, offset in (("esp32s3", "0x0"), ("esp32", "0x1000")):
        res = subprocess.run(
            [str(REPO / ".venv/bin/python"), "tools/flash/flash.py", "--port", "/dev/ttyWREN-NOPE",
             "--board", board, "--firmware", str(image), "--no-erase"],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )
        assert res.returncode != 0
        assert f"--baud 460800 write-flash {offset} {image}" in res.stdout


def test_flash_with_a_missing_image_says_so() -> None:
    res = make("flash", "PORT=/dev/ttyWREN-NOPE", "FIRMWARE=/nonexistent/mp.bin")
    assert res.returncode != 0
    assert "firmware image not found: /nonexistent/mp.bin" in res.stderr


def test_deploy_compiles_to_mpy_then_fails_clearly_without_a_board(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"wifi": [], "server_url": "ws://127.0.0.1:8000/xiaozhi/v1/"}')
    res = make("deploy", "PORT=/dev/ttyWREN-NOPE", f"CONFIG={config}")
    assert res.returncode != 0
    assert "mpy-cross -march=xtensawin" in res.stdout
    assert "mpremote connect /dev/ttyWREN-NOPE exec" in res.stdout  # the .mpy version question first
    assert "deploy: mpremote cannot find or talk to the board on /dev/ttyWREN-NOPE" in res.stderr
    built = REPO / "build" / "device"
    modules = ("wren_device/device.mpy", "wren_device/dsp.mpy", "hal/esp32/board.mpy",
               "shared_protocol/messages.mpy")
    for module in modules:
        assert (built / module).read_bytes()[:1] == b"M"  # a .mpy file
    assert not (built / "hal" / "host").exists()  # the host stand-ins never go to the board


def test_targets_without_their_required_variables_explain_themselves() -> None:
    assert "set FIRMWARE=" in make("flash").stdout  # PORT may be left out (esptool finds the board)
    assert "set MIC=" in make("sim").stdout


async def test_make_sim_runs_a_turn_against_a_server_and_reports_the_heap(tmp_path: Path) -> None:
    import asyncio

    import numpy as np

    from tests.firmware.xiaozhi_script import Conn, pcm_frame, serve
    from tests.support.spoken import write_wav

    async def handler(ws) -> None:
        c = Conn(ws)
        await c.hello()
        await c.next_json(type="listen", state="start")
        await c.collect_audio(5)
        await c.tts("start")
        await c.speak([pcm_frame(1234)] * 5)
        await c.tts("stop")
        await c.drain()

    mic = write_wav(tmp_path / "q.wav", (np.ones(16000, dtype="<i2") * 500).tobytes(), 16000)
    out = tmp_path / "reply.wav"
    server = await serve(handler)
    port = server.sockets[0].getsockname()[1]
    try:
        proc = await asyncio.create_subprocess_exec(
            "make", "--no-print-directory", "sim", f"MIC={mic}", f"SERVER=ws://127.0.0.1:{port}/xiaozhi/v1/",
            f"OUT={out}", "STAMP=",
            cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        try:
            stdout, _ = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    finally:
        server.close()
        await server.wait_closed()
    text = stdout.decode()
    assert proc.returncode == 0, text
    assert "micropython -X heapsize=160wk" in text
    assert "sim: exit 0" in text and "heap: high-water" in text
    assert out.stat().st_size == 44 + 5 * 1920


def test_firmware_without_esp_idf_or_a_container_engine_says_what_it_needs(tmp_path: Path) -> None:
    # Not built here (no ESP-IDF): only the clear failure. PATH holds what the recipe needs and nothing
    # else, so neither idf.py nor docker/podman is found; no IDF_PATH.
    import os
    import shutil
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("make", "sh", "bash", "env"):
        (bin_dir / name).symlink_to(shutil.which(name))
    (bin_dir / "python3").symlink_to(os.path.realpath(sys.executable))
    for board in ("esp32s3", "esp32"):
        res = subprocess.run(["make", "--no-print-directory", "firmware", f"BOARD={board}", "STAMP="],
                             cwd=REPO, capture_output=True, text=True, timeout=60,
                             env={"PATH": str(bin_dir), "HOME": str(tmp_path)})
        assert res.returncode == 2, res.stdout + res.stderr
        assert "make firmware: no ESP-IDF found, and neither docker nor podman" in res.stderr
        assert "IDF_PATH" in res.stderr and "espressif/idf:v5.5.1" in res.stderr
        assert ".github/workflows/firmware.yml" in res.stderr
    assert (REPO / ".github" / "workflows" / "firmware.yml").is_file()
