from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import free_port, stop, wait_for_port

SERVERS = Path(__file__).parent / "mcp_servers"


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
        stop(proc)


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
