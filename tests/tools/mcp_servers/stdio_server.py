"""A real stdio MCP server (mcp SDK) for the router tests. Run: python stdio_server.py"""

from __future__ import annotations

import asyncio
import os

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("wren-test-stdio")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two numbers."""
    return str(a + b)


@server.tool(name="self.audio_speaker.set_volume")
def set_volume(volume: int) -> str:
    """Set the volume of the house speakers (a server tool whose name clashes with the device's)."""
    return f"house speakers at {volume}"


@server.tool()
async def hang() -> str:
    """Never answers (for timeout tests)."""
    await asyncio.sleep(3600)
    return "late"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason."""
    raise ToolError(reason)


@server.tool()
def crash() -> str:
    """Kills this server process (for the dead-server tests)."""
    os._exit(3)


if __name__ == "__main__":
    server.run("stdio")
