"""What every tool source shares: a tool's description, a call's result, and the error a call raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class ToolError(Exception):
    """A tool call that failed; the message is the tool's own words (safe to speak)."""


class ToolTimeout(ToolError):
    """A tool that did not answer within its timeout."""


def _empty_schema() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=_empty_schema)
    source: str = ""  # "device" or "server:<name>", for logs and clash reports

    @classmethod
    def from_mcp(cls, item: dict[str, Any], source: str) -> ToolSpec:
        """Build from an MCP `tools/list` entry; a malformed schema becomes an empty object schema."""
        schema = item.get("inputSchema")
        if not isinstance(schema, dict):
            schema = _empty_schema()
        return cls(
            name=str(item["name"]),
            description=str(item.get("description") or ""),
            input_schema=schema,
            source=source,
        )

    @property
    def properties(self) -> dict[str, dict[str, Any]]:
        props = self.input_schema.get("properties")
        return props if isinstance(props, dict) else {}

    @property
    def required(self) -> list[str]:
        req = self.input_schema.get("required")
        return [str(r) for r in req] if isinstance(req, list) else []


@dataclass(frozen=True)
class ToolResult:
    """The outcome of a routed call: `text` is the tool's answer, or words describing the failure."""

    name: str
    text: str
    ok: bool


class ToolSource(Protocol):
    """Anything that lists tools and calls them (a device MCP client, the server MCP servers)."""

    @property
    def tools(self) -> list[ToolSpec]: ...

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> str: ...
