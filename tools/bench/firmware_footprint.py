"""Firmware footprint: the smallest MicroPython heap with which a full simulated turn still passes.

Filled in once the firmware simulator (`make sim`) exists; until then the phase reports "pending".
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.bench.common import REPO


def run(quick: bool) -> dict:
    if "sim:" not in (REPO / "Makefile").read_text():
        return {"status": "pending", "reason": "the firmware simulator (make sim) is not in the tree yet"}
    return {"status": "pending", "reason": "not wired yet"}
