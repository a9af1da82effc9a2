# MicroPython frozen manifest for the Wren build: FROZEN_MANIFEST=<absolute path>/firmware/manifest.py.
# Freezes the app (wren_device, main.py, boot.py), shared_protocol (the repo-root package it imports) and
# the hal of the port being built, on top of that port's own frozen modules (asyncio, ...):
#   unix port (make firmware-host): hal/host plus its machine/network stand-ins as top-level modules, so
#     the simulated board runs from the image alone (`micropython -m main`, no MICROPYPATH);
#   any other port (the ESP32): hal/esp32;
# and the pairing-code sounds (wren_digits, Opus: tools/firmware/digit_sounds.py writes it into the
# build cache, build_host.py / build_esp32.py make it first) when they are there; without them the board
# only shows and logs its code.
# Paths are relative to this file (makemanifest runs it from here).
import os

# A manifest is told paths, not the port's name: only the unix port has variants/standard.
try:
    include("$(PORT_DIR)/variants/standard/manifest.py")  # noqa: F821 (manifest API)
    host = True
except Exception as e:  # makemanifest's ManifestFileError
    if "variants/standard/manifest.py: [Errno 2]" not in str(e):
        raise  # that manifest exists but failed
    include("$(PORT_DIR)/boards/manifest.py")  # noqa: F821
    host = False

hal = "host" if host else "esp32"
stand_ins = ("machine.py", "network.py")  # on the board these are built in


def _py(directory, skip=()):
    return sorted(f for f in os.listdir(directory) if f.endswith(".py") and f not in skip)


package("wren_device")  # noqa: F821
package("shared_protocol", base_path="..")  # noqa: F821
package("hal", files=["__init__.py"] + [hal + "/" + f for f in _py("hal/" + hal, stand_ins)])  # noqa: F821
module("main.py")  # noqa: F821
module("boot.py")  # noqa: F821
if host:
    for name in stand_ins:
        module(name, base_path="hal/host")  # noqa: F821
digits = "../.cache/firmware-assets/wren_digits.py"
if os.path.isfile(digits):
    module("wren_digits.py", base_path=os.path.dirname(digits))  # noqa: F821
