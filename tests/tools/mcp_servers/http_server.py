"""A real streamable-HTTP MCP server (mcp SDK) for the router tests. Run: python http_server.py PORT"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("wren-test-http")


@server.tool()
def weather_forecast(city: str) -> str:
    """Get the weather forecast for a city."""
    return f"Sunny and 21 degrees in {city.title()}."


@server.tool()
def add(a: int, b: int) -> str:
    """Add two numbers (clashes with the stdio server's add; the first configured server wins)."""
    return f"http says {a + b}"


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
