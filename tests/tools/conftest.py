from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVERS = Path(__file__).parent / "mcp_servers"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}")
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port}")


@pytest.fixture(scope="module")
def http_mcp_url() -> Iterator[str]:
    """A real streamable-HTTP MCP server (mcp SDK) in a subprocess on a loopback port."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVERS / "http_server.py"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture
def mcp_servers_file(tmp_path: Path, http_mcp_url: str) -> Path:
    """The common mcpServers shape: a stdio server listed first, then the HTTP one."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "local": {"command": sys.executable, "args": [str(SERVERS / "stdio_server.py")]},
        "remote": {"url": http_mcp_url},
        "off": {"command": "does-not-matter", "disabled": True},
    }}))
    return path
