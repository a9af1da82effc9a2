"""Compile the firmware and shared_protocol to .mpy and copy them, with config.json, to a board.

    python tools/flash/deploy.py [--port /dev/ttyACM0] [--config firmware/config.json]

mpy-cross -march=xtensawin for every module (the viper ones need it; bytecode-only ones don't mind),
main.py and boot.py stay source. The esp32 hal is copied, the host one never is, and so are the
pairing-code sounds (tools/firmware/digit_sounds.py, IMA ADPCM, cached by its inputs) as /digits.wdg;
without piper in this Python they are left out and the board only shows and logs its code. Without
--port mpremote finds the board itself (`connect auto`: the first USB serial port). Before anything is
copied the board is asked for its .mpy version (sys.implementation._mpy): a MicroPython that cannot load
what mpy-cross made (another .mpy version, or not an Xtensa core) stops the deploy with what to flash
instead. Every command is printed before it runs and mpremote's progress is shown as it goes; a board
mpremote cannot reach gives one clear error and exit status 1.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIRMWARE = REPO / "firmware"
BIN = Path(sys.executable).parent
# (source dir, destination dir on the board)
PACKAGES = [
    (FIRMWARE / "wren_device", "wren_device"),
    (FIRMWARE / "hal" / "esp32", "hal/esp32"),
    (REPO / "shared_protocol", "shared_protocol"),
]
ARCH_XTENSAWIN = 10  # sys.implementation._mpy >> 10 on an ESP32 / ESP32-S3 (MP_NATIVE_ARCH_XTENSAWIN)
PROBE = "import sys; print('MPY', sys.implementation._mpy)"


def tool(name: str) -> str:
    local = BIN / name
    return str(local) if local.exists() else name


def mpy_cross_version() -> tuple[int, int]:
    """(version, sub-version) of the .mpy files mpy-cross writes ("... emitting mpy v6.3")."""
    out = subprocess.run([tool("mpy-cross"), "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"mpy v(\d+)\.(\d+)", out)
    if not m:
        sys.exit(f"deploy: cannot tell the .mpy version from mpy-cross --version: {out.strip()!r}")
    return int(m[1]), int(m[2])


def check_board(connect: list[str], where: str, want: tuple[int, int]) -> None:
    """Stop unless the board's MicroPython loads .mpy files of version `want` with Xtensa native code."""
    cmd = [*connect, "exec", PROBE]
    print("+ " + shlex.join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"^MPY (\d+)", proc.stdout, re.MULTILINE)
    if proc.returncode != 0 or not m:
        reason = (proc.stderr or proc.stdout).strip().splitlines()
        sys.exit(
            f"deploy: mpremote cannot find or talk to the board on {where} "
            f"({reason[-1] if reason else 'no output'}).\n"
            "        Check PORT, that MicroPython is flashed (make flash), and that no REPL holds the port."
        )
    value = int(m[1])
    version, sub, arch = value & 0xFF, (value >> 8) & 3, value >> 10
    print(f"deploy: the board loads .mpy v{version}.{sub} (arch {arch}); "
          f"mpy-cross writes v{want[0]}.{want[1]}")
    if (version, sub) != want:
        sys.exit(
            f"deploy: the board's MicroPython loads .mpy v{version}.{sub}, but this mpy-cross writes "
            f"v{want[0]}.{want[1]} (viper modules need both to match).\n"
            "        Flash a MicroPython of the same series as the mpy-cross in .venv (make flash), or "
            "install the mpy-cross that matches the board's MicroPython."
        )
    if arch != ARCH_XTENSAWIN:
        sys.exit(f"deploy: the board reports native architecture {arch}, not xtensawin ({ARCH_XTENSAWIN}): "
                 "the Wren firmware is built for an ESP32 or ESP32-S3")


def build(out: Path) -> list[Path]:
    """Compile every module into `out`, mirroring the board layout; returns the top-level entries."""
    if out.exists():
        shutil.rmtree(out)
    (out / "hal").mkdir(parents=True)
    (out / "hal" / "__init__.py").write_text("")
    for src_dir, dest in PACKAGES:
        for src in sorted(src_dir.glob("*.py")):
            target = out / dest / (src.stem + ".mpy")
            target.parent.mkdir(parents=True, exist_ok=True)
            cmd = [tool("mpy-cross"), "-march=xtensawin", "-o", str(target), str(src)]
            print("+ " + shlex.join(cmd), flush=True)
            subprocess.run(cmd, check=True)
    for name in ("main.py", "boot.py"):
        shutil.copy(FIRMWARE / name, out / name)
    return [out / "wren_device", out / "hal", out / "shared_protocol", out / "main.py", out / "boot.py",
            *digit_sounds(out)]


def digit_sounds(out: Path) -> list[Path]:
    """The pairing-code sounds of the stock build, as out/digits.wdg (the hal's sounds_path on the board)."""
    cmd = [sys.executable, str(REPO / "tools" / "firmware" / "digit_sounds.py"), "--quiet"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    made = [Path(p) for p in res.stdout.split() if p.endswith("digits-adpcm.wdg")]
    if res.returncode != 0 or not made:
        why = (res.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"deploy: no pairing-code sounds ({why}); the board will show and log its code only")
        return []
    shutil.copy(made[0], out / "digits.wdg")
    print(f"deploy: pairing-code sounds {made[0].resolve().stat().st_size} bytes -> :digits.wdg")
    return [out / "digits.wdg"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", default="", help="serial port (default: mpremote finds the board)")
    ap.add_argument("--config", default=str(FIRMWARE / "config.json"))
    ap.add_argument("--build-dir", default=str(REPO / "build" / "device"))
    ap.add_argument("--no-reset", action="store_true")
    args = ap.parse_args(argv)
    config = Path(args.config)
    if not config.is_file():
        sys.exit(
            f"deploy: no {config}: copy firmware/config.example.json there and fill in Wi-Fi and server "
            "(it holds secrets: keep it out of git)"
        )
    entries = build(Path(args.build_dir))
    connect = [tool("mpremote"), "connect", args.port or "auto"]
    where = args.port or "any USB serial port (auto)"
    check_board(connect, where, mpy_cross_version())
    cmd = [*connect, "cp", "-r", *[str(e) for e in entries], ":"]
    cmd += ["+", "cp", str(config), ":config.json"]
    if not args.no_reset:
        cmd += ["+", "reset"]
    print("+ " + shlex.join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode  # mpremote's own output (what it copies) as it goes
    if rc != 0:
        sys.exit(f"deploy: mpremote failed on {where} (exit {rc}, its message above).\n"
                 "        Check that no REPL holds the port and that the board's filesystem has room.")
    print("deploy: done; the board restarts into Wren")


if __name__ == "__main__":
    main()
