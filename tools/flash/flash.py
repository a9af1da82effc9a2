"""Flash a MicroPython image onto an ESP32-S3 or ESP32 with esptool v5 (hyphenated commands).

    python tools/flash/flash.py [--port /dev/ttyACM0] --board esp32s3 --firmware ESP32_GENERIC_S3-….bin

Merged images go at 0x0 on the S3 and at 0x1000 on the plain ESP32 (notes §5.1). Without --port esptool
finds the board itself (it tries the serial ports it sees). Every command is printed before it runs and
esptool's progress is shown as it goes; a board that cannot be reached gives one clear error line and exit
status 1.
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


def run(cmd: list[str], where: str) -> None:
    print("+ " + shlex.join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode  # esptool's progress bar and messages straight to the terminal
    if rc != 0:
        sys.exit(
            f"flash: esptool cannot find or talk to the board on {where} (exit {rc}, its reason above).\n"
            "       Check PORT (ls /dev/ttyACM* /dev/ttyUSB*) and the USB cable; hold BOOT while tapping "
            "RST if the board does not enter the bootloader."
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", default="", help="serial port (default: esptool finds the board)")
    ap.add_argument("--board", choices=sorted(CHIPS), default="esp32s3")
    ap.add_argument("--firmware", required=True, help="MicroPython image (.bin)")
    ap.add_argument("--baud", default="460800")
    ap.add_argument("--no-erase", action="store_true", help="skip erase-flash (keeps the filesystem)")
    args = ap.parse_args(argv)
    image = Path(args.firmware)
    if not image.is_file():
        sys.exit(f"flash: firmware image not found: {image} (download one from micropython.org/download)")
    chip, offset = CHIPS[args.board]
    base = [esptool(), "--chip", chip, *(["--port", args.port] if args.port else [])]
    where = args.port or "any serial port (auto-detect)"
    if not args.no_erase:
        run([*base, "erase-flash"], where)
    run([*base, "--baud", args.baud, "write-flash", offset, str(image)], where)
    print("flash: done. Next: make deploy" + (f" PORT={args.port}" if args.port else ""))


if __name__ == "__main__":
    main()
