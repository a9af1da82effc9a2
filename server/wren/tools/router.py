"""Resolve a tool name to a server MCP tool first, a device tool as fallback, and call it safely.

Clash policy (deterministic): when a server tool and a device tool share a name, the server tool wins
and the device tool is hidden; the clash is logged once per name. Every call has a timeout, and every
failure (tool error, timeout, unknown tool, crashed server) comes back as a `ToolResult` with `ok=False`
and words an engine can speak, so a tool can never leave a turn stuck.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from wren.tools.spec import ToolError, ToolResult, ToolSource, ToolSpec, ToolTimeout

log = logging.getLogger(__name__)
_reported_clashes: set[str] = set()


def humanize_tool_name(name: str) -> str:
    """`self.audio_speaker.set_volume` -> `audio speaker set volume` (for spoken words)."""
    parts = [p for p in name.replace("-", "_").split(".") if p and p != "self"]
    return " ".join(" ".join(parts).split("_")).strip() or name


class ToolRouter:
    def __init__(
        self,
        server: ToolSource | None = None,
        device: ToolSource | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.server = server
        self.device = device
        self.timeout = timeout

    def _server_tools(self) -> list[ToolSpec]:
        return list(self.server.tools) if self.server is not None else []

    def _device_tools(self) -> list[ToolSpec]:
        return list(self.device.tools) if self.device is not None else []

    @property
    def tools(self) -> list[ToolSpec]:
        """All callable tools, server tools first; device tools shadowed by a server tool are left out."""
        server_tools = self._server_tools()
        taken = {t.name for t in server_tools}
        result = list(server_tools)
        for tool in self._device_tools():
            if tool.name in taken:
                if tool.name not in _reported_clashes:
                    _reported_clashes.add(tool.name)
                    log.warning("tool name clash: %r exists on the server and the device; server wins",
                                tool.name)
                continue
            result.append(tool)
        return result

    def find(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    def _source_for(self, name: str) -> tuple[str, ToolSource] | None:
        if self.server is not None and any(t.name == name for t in self._server_tools()):
            return "server", self.server
        if self.device is not None and any(t.name == name for t in self._device_tools()):
            return "device", self.device
        return None

    async def call(self, name: str, arguments: dict[str, Any] | None = None,
                   timeout: float | None = None) -> ToolResult:
        timeout = self.timeout if timeout is None else timeout
        spoken = humanize_tool_name(name)
        found = self._source_for(name)
        if found is None:
            return ToolResult(name, f"I don't have a tool called {spoken}.", ok=False)
        where, source = found
        log.info("tool call %s (%s) %s", name, where, arguments)
        try:
            # The source applies the timeout itself; the outer guard catches a source that ignores it.
            text = await asyncio.wait_for(source.call(name, dict(arguments or {}), timeout), timeout + 1.0)
        except TimeoutError:
            log.warning("tool %s timed out after %.1fs", name, timeout)
            return ToolResult(name, f"The {spoken} tool did not answer in time.", ok=False)
        except ToolError as exc:
            if isinstance(exc, ToolTimeout):
                log.warning("tool %s timed out after %.1fs", name, timeout)
                return ToolResult(name, f"The {spoken} tool did not answer in time.", ok=False)
            message = str(exc) or "it failed"
            log.info("tool %s failed: %s", name, message)
            return ToolResult(name, f"The {spoken} tool failed: {message}", ok=False)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken tool source must never break the turn
            log.exception("tool %s crashed", name)
            return ToolResult(name, f"The {spoken} tool failed: {exc.__class__.__name__}.", ok=False)
        return ToolResult(name, text, ok=True)
