"""Compile the firmware and shared_protocol to .mpy and copy them, with config.json, to a board.

    python tools/flash/deploy.py --port /dev/ttyACM0 [--config firmware/config.json]

mpy-cross -march=xtensawin for every module (the viper ones need it; bytecode-only ones don't mind),
main.py and boot.py stay source. The esp32 hal is copied, the host one never is. Every command is
printed before it runs; a board mpremote cannot reach gives one clear error and exit status 1.
"""

from __future__ import annotations

import argparse
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


def tool(name: str) -> str:
    local = BIN / name
    return str(local) if local.exists() else name


def build(out: Path) -> list[Path]:
    """Compile every module into `out`, mirroring the board layout; returns the top-level entries."""
    if out.exists():
        shutil.rmtree(out)
    (out / "hal").mkdir(parents=True)
    (out / "hal" / "__init__.py").write_text("")
    files = [out / "hal" / "__init__.py"]
    for src_dir, dest in PACKAGES:
        for src in sorted(src_dir.glob("*.py")):
            target = out / dest / (src.stem + ".mpy")
            target.parent.mkdir(parents=True, exist_ok=True)
            cmd = [tool("mpy-cross"), "-march=xtensawin", "-o", str(target), str(src)]
            print("+ " + shlex.join(cmd), flush=True)
            subprocess.run(cmd, check=True)
            files.append(target)
    for name in ("main.py", "boot.py"):
        shutil.copy(FIRMWARE / name, out / name)
    return [out / "wren_device", out / "hal", out / "shared_protocol", out / "main.py", out / "boot.py"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", required=True)
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
    cmd = [tool("mpremote"), "connect", args.port, "cp", "-r", *[str(e) for e in entries], ":"]
    cmd += ["+", "cp", str(config), ":config.json"]
    if not args.no_reset:
        cmd += ["+", "reset"]
    print("+ " + shlex.join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        reason = (proc.stderr or proc.stdout).strip().splitlines()
        sys.exit(
            f"deploy: mpremote cannot find or talk to the board on {args.port} "
            f"({reason[-1] if reason else 'no output'}).\n"
            "        Check PORT, that MicroPython is flashed (make flash), and that no REPL holds the port."
        )
    print("deploy: done; the board restarts into Wren")


if __name__ == "__main__":
    main()
