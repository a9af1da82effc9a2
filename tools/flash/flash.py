"""Flash a MicroPython image onto an ESP32-S3 or ESP32 with esptool v5 (hyphenated commands).

    python tools/flash/flash.py --port /dev/ttyACM0 --board esp32s3 --firmware ESP32_GENERIC_S3-….bin

Merged images go at 0x0 on the S3 and at 0x1000 on the plain ESP32 (notes §5.1). Every command is
printed before it runs; a board that cannot be reached gives one clear error line and exit status 1.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
CHIPS = {"esp32s3": ("esp32s3", "0x0"), "esp32": ("esp32", "0x1000")}


def esptool() -> str:
    local = BIN / "esptool"
    return str(local) if local.exists() else "esptool"


def run(cmd: list[str], port: str) -> None:
    print("+ " + shlex.join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        reason = next((line for line in detail if "error" in line.lower()), detail[-1] if detail else "")
        sys.exit(
            f"flash: esptool cannot find or talk to the board on {port} ({reason.strip()}).\n"
            "       Check PORT (ls /dev/ttyACM* /dev/ttyUSB*) and the USB cable; hold BOOT while tapping "
            "RST if the board does not enter the bootloader."
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", required=True)
    ap.add_argument("--board", choices=sorted(CHIPS), default="esp32s3")
    ap.add_argument("--firmware", required=True, help="MicroPython image (.bin)")
    ap.add_argument("--baud", default="460800")
    ap.add_argument("--no-erase", action="store_true", help="skip erase-flash (keeps the filesystem)")
    args = ap.parse_args(argv)
    image = Path(args.firmware)
    if not image.is_file():
        sys.exit(f"flash: firmware image not found: {image} (download one from micropython.org/download)")
    chip, offset = CHIPS[args.board]
    base = [esptool(), "--chip", chip, "--port", args.port]
    if not args.no_erase:
        run([*base, "erase-flash"], args.port)
    run([*base, "--baud", args.baud, "write-flash", offset, str(image)], args.port)
    print(f"flash: done. Next: make deploy PORT={args.port}")


if __name__ == "__main__":
    main()
