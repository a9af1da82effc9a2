"""Runs mp_api.py under the real MicroPython interpreter: constructors, errors, zero-allocation framing."""

import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def test_shared_protocol_api_works_on_micropython_with_a_small_heap() -> None:
    env = dict(os.environ, MICROPYPATH=str(REPO) + ":" + str(HERE))
    proc = subprocess.run(
        [str(REPO / ".venv" / "bin" / "micropython"), "-X", "heapsize=64wk", str(HERE / "mp_api.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("ran ") and last.endswith(" checks, 0 failed"), output
    assert int(last.split()[1]) >= 50, output
