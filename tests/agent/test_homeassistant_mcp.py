"""Home Assistant's MCP server as an `mcpServers` entry (docs/agent.md, "Home Assistant"), against a real
mcp SDK streamable-HTTP server at `/api/mcp` that, like HA, refuses requests without the bearer token."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from wren.tools.router import ToolRouter
from wren.tools.server_mcp import ServerMcpTools

from tests.agent.ha_server import TOKEN
from tests.support.processes import free_port, stop, wait_for_port

SERVER = Path(__file__).parent / "ha_mcp_server.py"


@pytest.fixture(scope="module")
def ha_base_url() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), str(port), TOKEN],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


def servers_file(tmp_path: Path, base_url: str, token: str) -> Path:
    """The entry exactly as docs/agent.md shows it."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "home-assistant": {"url": f"{base_url}/api/mcp", "headers": {"Authorization": f"Bearer {token}"}},
    }}))
    return path


async def test_the_home_assistant_entry_sends_its_bearer_token_and_its_tools_can_be_called(
    tmp_path, ha_base_url
):
    tools = ServerMcpTools.from_file(servers_file(tmp_path, ha_base_url, TOKEN))
    try:
        await asyncio.wait_for(tools.start(), 60)
        assert {"HassTurnOn", "GetLiveContext"} <= {t.name for t in tools.tools}
        router = ToolRouter(server=tools, timeout=10)
        turned = await router.call("HassTurnOn", {"name": "kitchen"})
        assert (turned.ok, turned.text) == (True, "Turned on the kitchen.")
        assert "kitchen: on" in (await router.call("GetLiveContext", {})).text
    finally:
        await asyncio.wait_for(tools.close(), 30)


async def test_a_wrong_token_gives_no_home_assistant_tools_and_a_logged_reason(tmp_path, ha_base_url, caplog):
    tools = ServerMcpTools.from_file(servers_file(tmp_path, ha_base_url, "not-the-token"))
    try:
        with caplog.at_level(logging.WARNING, logger="wren.tools.server_mcp"):
            await asyncio.wait_for(tools.start(), 60)
        assert tools.tools == []
        assert "MCP server home-assistant unavailable" in caplog.text
        assert not (await ToolRouter(server=tools, timeout=5).call("HassTurnOn", {"name": "kitchen"})).ok
    finally:
        await asyncio.wait_for(tools.close(), 30)
