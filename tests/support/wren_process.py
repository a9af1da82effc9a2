"""`wren serve` as a real subprocess on 127.0.0.1 (ephemeral port), as a user or CI would run it.

Its output goes to a log file next to its data directory (a pipe nobody reads could fill and stall
the server). The context manager always stops it: SIGTERM, then SIGKILL if it does not exit in 30 s.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass
class WrenProcess:
    proc: subprocess.Popen
    port: int
    log_path: Path

    def log_text(self) -> str:
        return self.log_path.read_text()


@contextmanager
def wren_serve(
    data_dir: Path, env: dict[str, str] | None = None, start_timeout: float = 180, host: str = "127.0.0.1"
) -> Iterator[WrenProcess]:
    """Start `wren serve` with its data in `data_dir`; `env` adds WREN_* options. Inherited WREN_*
    variables are dropped so the caller's environment cannot change what is tested."""
    log_path = data_dir / "server.log"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("WREN_")}
    # Open mode unless the test asks for another: pairing has its own tests (tests/server/test_pairing.py).
    # No "One moment." unless asked: it comes only when a reply's first audio is late, i.e. when the box is
    # busy (a fresh process's first synthesis, the suite's other workers), and a reply's words must not
    # depend on that (tests/server/test_hold_phrase.py tests it).
    full_env.update({"WREN_SERVER_DATA_DIR": str(data_dir), "WREN_AUTH_MODE": "open", "PYTHONUNBUFFERED": "1",
                     "WREN_AGENT_HOLD_PHRASE_AFTER_MS": "0", **(env or {})})
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "wren.cli", "serve", "--host", host, "--port", "0"],
            stdout=log, stderr=subprocess.STDOUT, text=True, env=full_env, cwd=REPO,
        )
        try:
            port = None
            deadline = time.monotonic() + start_timeout
            while port is None and time.monotonic() < deadline and proc.poll() is None:
                m = re.search(r"listening on port (\d+)", log_path.read_text())
                port = int(m.group(1)) if m else None
                if port is None:
                    time.sleep(0.2)
            assert port, "wren serve did not start:\n" + log_path.read_text()
            yield WrenProcess(proc, port, log_path)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
