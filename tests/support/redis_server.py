"""A real `redis-server` (Debian's package; `make test` installs it) on a free 127.0.0.1 port, for the
shared store's tests. Nothing is saved to disk; the context manager always stops it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def require_redis_server() -> str:
    """The redis-server binary, or a skip that says how to get it."""
    if not Path(REDIS_SERVER).exists():
        pytest.skip("redis-server is not installed (make test installs it: apt-get install redis-server)")
    return REDIS_SERVER


@contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """Start redis-server; yields its URL (redis://127.0.0.1:PORT/0)."""
    binary = require_redis_server()
    port = _free_port()
    log = workdir / "redis.log"
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
         "--dir", str(workdir), "--logfile", str(log)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start: " + (log.read_text() if log.exists() else ""))
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
