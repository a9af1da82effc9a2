"""tools/flash with stand-ins for the board tools (no board here): `make deploy` asks the board for its
.mpy version before copying anything, esptool's and mpremote's progress reaches the terminal as it comes
(nothing captured), and PORT may be left out: the tools then find the board themselves."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.firmware.conftest import REPO

FAKE = """#!{python}
# Stand-in for {name}: logs its arguments, prints what the real tool would, exits as told.
import json, os, sys
with open({log!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if {name!r} == "mpremote" and "exec" in sys.argv:
    print("MPY", os.environ.get("FAKE_MPY", "11014"))
elif {name!r} == "mpremote":
    print("cp build/device/wren_device :wren_device  (progress: 42 files)")
else:
    print("Writing at 0x00010000 [======>      ]  50.0% 600000/1200000 bytes...")
sys.exit(int(os.environ.get("FAKE_RC", "0")))
"""


def load(name: str):
    path = REPO / "tools" / "flash" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"wren_flash_{name}", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def fake(tmp_path: Path, name: str) -> tuple[str, Path]:
    log = tmp_path / f"{name}.log"
    path = tmp_path / name
    path.write_text(FAKE.format(python=sys.executable, name=name, log=str(log)))
    path.chmod(0o755)
    return str(path), log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def deploy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    module = load("deploy")
    mpremote, log = fake(tmp_path, "mpremote")
    real = module.tool
    monkeypatch.setattr(module, "tool", lambda name: mpremote if name == "mpremote" else real(name))
    config = tmp_path / "config.json"
    config.write_text("{}")
    args = ["--config", str(config), "--build-dir", str(tmp_path / "build")]
    return module, log, args


def xtensawin_mpy(version: int, sub: int) -> str:
    return str(version | sub << 8 | 10 << 10)  # sys.implementation._mpy of an ESP32 / S3 image


def test_deploy_checks_the_boards_mpy_version_then_copies_with_live_output(
    deploy, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    module, log, args = deploy
    version, sub = module.mpy_cross_version()
    monkeypatch.setenv("FAKE_MPY", xtensawin_mpy(version, sub))
    module.main(args)  # no --port: mpremote finds the board
    out = capfd.readouterr().out
    done = calls(log)
    assert done[0][:3] == ["connect", "auto", "exec"] and "sys.implementation._mpy" in done[0][3]
    assert done[1][:4] == ["connect", "auto", "cp", "-r"]
    assert ":config.json" in done[1] and done[1][-1] == "reset"
    assert any(a.endswith("build/digits.wdg") for a in done[1])  # the pairing-code sounds, to /digits.wdg
    assert f"the board loads .mpy v{version}.{sub} (arch 10)" in out
    assert "(progress: 42 files)" in out  # mpremote's own output, not swallowed
    assert "deploy: done" in out


def test_deploy_with_a_port_uses_it(deploy, monkeypatch: pytest.MonkeyPatch) -> None:
    module, log, args = deploy
    monkeypatch.setenv("FAKE_MPY", xtensawin_mpy(*module.mpy_cross_version()))
    module.main([*args, "--port", "/dev/ttyACM7", "--no-reset"])
    assert [c[:2] for c in calls(log)] == [["connect", "/dev/ttyACM7"]] * 2
    assert "reset" not in calls(log)[1]


@pytest.mark.parametrize(("mpy", "says"), [
    ("mismatch", "but this mpy-cross writes"),
    (str(6 | 3 << 8 | 11 << 10), "not xtensawin"),  # a RISC-V board (ESP32-C3)
])
def test_deploy_stops_before_copying_to_a_board_that_cannot_load_the_mpy_files(
    deploy, monkeypatch: pytest.MonkeyPatch, mpy: str, says: str
) -> None:
    module, log, args = deploy
    version, sub = module.mpy_cross_version()
    if mpy == "mismatch":
        mpy = xtensawin_mpy(version, (sub + 1) % 4)
    monkeypatch.setenv("FAKE_MPY", mpy)
    with pytest.raises(SystemExit) as e:
        module.main(args)
    assert says in str(e.value)
    assert len(calls(log)) == 1  # only the question, nothing copied


def test_deploy_without_a_reachable_board_says_so(deploy, monkeypatch: pytest.MonkeyPatch) -> None:
    module, _log, args = deploy
    monkeypatch.setenv("FAKE_RC", "1")
    with pytest.raises(SystemExit) as e:
        module.main(args)
    assert "mpremote cannot find or talk to the board on any USB serial port (auto)" in str(e.value)


def test_flash_shows_esptools_progress_and_finds_the_port_itself(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load("flash")
    esptool, log = fake(tmp_path, "esptool")
    monkeypatch.setattr(module, "esptool", lambda: esptool)
    image = tmp_path / "mp.bin"
    image.write_bytes(b"\xe9" + bytes(15))
    module.main(["--board", "esp32", "--firmware", str(image)])
    out = capfd.readouterr().out
    assert calls(log) == [["--chip", "esp32", "erase-flash"],
                          ["--chip", "esp32", "--baud", "460800", "write-flash", "0x1000", str(image)]]
    assert out.count("50.0% 600000/1200000 bytes") == 2  # esptool's progress, as it printed it
    module.main(["--port", "/dev/ttyUSB3", "--board", "esp32s3", "--firmware", str(image), "--no-erase"])
    assert calls(log)[-1][:4] == ["--chip", "esp32s3", "--port", "/dev/ttyUSB3"]
    monkeypatch.setenv("FAKE_RC", "2")
    with pytest.raises(SystemExit) as e:
        module.main(["--board", "esp32", "--firmware", str(image)])
    assert "cannot find or talk to the board on any serial port (auto-detect) (exit 2" in str(e.value)
