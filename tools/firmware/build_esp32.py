"""`make firmware BOARD=esp32s3|esp32`: the Wren build for a board (MicroPython 1.28.0's esp32 port with
the `opus` user C module and the app frozen in), from the same pinned sources as `make firmware-host`.

    python3 tools/firmware/build_esp32.py --board esp32s3|esp32 [--vendor DIR] [--idf-image IMAGE]

ESP-IDF comes from the user's environment: `idf.py` on PATH (an ESP-IDF v5.5.x shell after
`. $IDF_PATH/export.sh`), or $IDF_PATH (its export.sh is sourced for the build); otherwise from
Espressif's official container image (espressif/idf, --idf-image, default the version MicroPython 1.28.0
recommends) through docker or podman.
With none of them it says so and exits 2. Not run on the machines Wren is developed on (no ESP-IDF there).

The build: `make -C mpy-cross`, then in ports/esp32 `make BOARD=<ESP32_GENERIC_S3 | ESP32_GENERIC>
[BOARD_VARIANT=SPIRAM_OCT] USER_C_MODULES=firmware/modules/micropython.cmake
FROZEN_MANIFEST=firmware/manifest.py` with OPUS_DIR set and btree off (its berkeley-db submodule is not
part of the pinned sources). The image is copied to build/firmware/<board>/firmware.bin (the merged image
that `make flash` writes).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_host

REPO = build_host.REPO
IDF_IMAGE = "espressif/idf:v5.5.1"  # MicroPython 1.28.0's recommended ESP-IDF (ports/esp32/README.md)
BOARDS = {  # make firmware BOARD= -> (MicroPython board, variant): the images `make flash` knows
    "esp32s3": ("ESP32_GENERIC_S3", "SPIRAM_OCT"),  # N8R8/N16R8 modules; Opus state in PSRAM
    "esp32": ("ESP32_GENERIC", ""),
}
NO_IDF = """make firmware: no ESP-IDF found, and neither docker nor podman to run its container.
  The ESP32 build needs one of:
  - ESP-IDF v5.5.x: `. $IDF_PATH/export.sh` (idf.py on PATH), or IDF_PATH set in the environment;
  - docker or podman: the build then runs in Espressif's image {image};
  - GitHub: the workflow .github/workflows/firmware.yml builds both boards on a hosted runner.
  (docs/firmware.md, "The ESP32 image")"""


def toolchain(image: str) -> tuple[str, str]:
    """-> ("idf", "") for idf.py on PATH, ("idf_path", dir) for $IDF_PATH, ("container", engine); exits 2."""
    if shutil.which("idf.py"):
        return "idf", ""
    idf_path = os.environ.get("IDF_PATH", "")
    if idf_path and (Path(idf_path) / "export.sh").is_file():
        return "idf_path", idf_path
    for engine in ("docker", "podman"):
        if shutil.which(engine):
            return "container", engine
    print(NO_IDF.format(image=image), file=sys.stderr)
    sys.exit(2)


def make_script(mp: str, opus: str, board: str, variant: str) -> str:
    """The shell commands of the build, with the paths as the build environment sees them."""
    module = f"{REPO_IN}/firmware/modules/micropython.cmake"
    args = [f"BOARD={board}", *([f"BOARD_VARIANT={variant}"] if variant else []), f"USER_C_MODULES={module}",
            f"FROZEN_MANIFEST={REPO_IN}/firmware/manifest.py",
            # Set on the command line, CMAKE_ARGS replaces the port Makefile's (which only carries
            # USER_C_MODULES), so the module goes in it too.
            f"CMAKE_ARGS=-DMICROPY_PY_BTREE=OFF -DUSER_C_MODULES={module}"]
    return (f"set -e; export OPUS_DIR={shlex.quote(opus)}; make -C {shlex.quote(mp)}/mpy-cross; "
            f"make -C {shlex.quote(mp)}/ports/esp32 " + " ".join(shlex.quote(a) for a in args))


REPO_IN = str(REPO)  # the repository's path inside the build environment (the container mounts it there)


def main(argv: list[str] | None = None) -> int:
    global REPO_IN
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", choices=sorted(BOARDS), required=True)
    ap.add_argument("--vendor", default="../shared/vendor", help="vendored sources (relative to the repo)")
    ap.add_argument("--cache", default=str(REPO / ".cache" / "firmware-host"), help="where the sources are")
    ap.add_argument("--idf-image", default=IDF_IMAGE)
    args = ap.parse_args(argv)
    kind, where = toolchain(args.idf_image)  # before any work: no toolchain, no sources fetched
    board, variant = BOARDS[args.board]
    cache = Path(args.cache).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    src = build_host.prepare_sources(cache, args.vendor)
    build_host.digit_sounds()  # .cache/firmware-assets/wren_digits.py, frozen by the manifest when there
    mp, opus = src / build_host.MP_DIR, src / build_host.OPUS_DIR
    if kind == "container":
        REPO_IN = "/wren"
        script = make_script(f"/src/{build_host.MP_DIR}", f"/src/{build_host.OPUS_DIR}", board, variant)
        cmd = [where, "run", "--rm", "-v", f"{REPO}:/wren:ro", "-v", f"{src}:/src", "-w", "/src",
               "-u", f"{os.getuid()}:{os.getgid()}", "-e", "HOME=/tmp", args.idf_image, "bash", "-c", script]
    else:
        script = make_script(str(mp), str(opus), board, variant)
        if kind == "idf_path":
            script = f". {shlex.quote(where)}/export.sh >/dev/null; " + script
        cmd = ["bash", "-c", script]
    print("+ " + shlex.join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode  # ESP-IDF's own progress, live
    if rc != 0:
        print(f"make firmware: the ESP32 build failed (exit {rc}; its output above)", file=sys.stderr)
        return 1
    build = mp / "ports" / "esp32" / (f"build-{board}-{variant}" if variant else f"build-{board}")
    out = REPO / "build" / "firmware" / args.board
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(build / "firmware.bin", out / "firmware.bin")
    print(f"make firmware: {out / 'firmware.bin'}; write it with "
          f"make flash BOARD={args.board} FIRMWARE={(out / 'firmware.bin').relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
