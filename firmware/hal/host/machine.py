# Host stand-in for the ESP32 `machine` module: the built-in (reachable as umachine) plus the few calls
# the firmware makes. Only ever on MICROPYPATH in the simulation (notes §7.8).
import sys

from umachine import *  # noqa: F403


def reset():
    print("machine.reset(): simulated reboot, exiting")
    sys.exit(3)


def unique_id():
    return b"\x02\x00\x00\x00\x00\x01"


def freq(hz=None):
    return 240000000
