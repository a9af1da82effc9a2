"""A real streamable-HTTP MCP server (mcp SDK) shaped like Home Assistant's `mcp_server` integration.

Served at `/api/mcp` behind a long-lived-token check, as HA serves it: a request without
`Authorization: Bearer <token>` gets `401: Unauthorized` before the MCP layer sees it. Its tools carry
HA's Assist intent names. Run: python ha_mcp_server.py PORT TOKEN
"""

from __future__ import annotations

import sys
from typing import Any

from mcp.server.mcpserver import MCPServer

TOKEN = sys.argv[2] if len(sys.argv) > 2 else ""


class GuardedServer(MCPServer):
    """The SDK's own streamable-HTTP app and runner, with HA's token check in front of the app."""

    def streamable_http_app(self, **options: Any) -> Any:
        return bearer_only(super().streamable_http_app(**options), TOKEN)


server = GuardedServer("home-assistant-test")
lights: dict[str, str] = {"kitchen": "off"}


@server.tool(name="HassTurnOn")
def hass_turn_on(name: str) -> str:
    """Turns on/opens/presses a device or entity."""
    lights[name] = "on"
    return f"Turned on the {name}."


@server.tool(name="GetLiveContext")
def get_live_context() -> str:
    """Provides real-time information about the CURRENT state of devices in the home."""
    return "\n".join(f"- {name}: {state}" for name, state in sorted(lights.items()))


def bearer_only(app: Any, token: str) -> Any:
    """The ASGI app, refusing HTTP requests without the token as HA's auth middleware does."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8")]})
            await send({"type": "http.response.body", "body": b"401: Unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


if __name__ == "__main__":
    # Stateless JSON responses, as HA's implementation answers each POST on its own.
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]), streamable_http_path="/api/mcp",
               stateless_http=True, json_response=True)
