"""Server-side MCP servers (stdio and streamable HTTP) configured in the common `mcpServers` JSON shape.

```json
{"mcpServers": {
    "files":   {"command": "uvx", "args": ["mcp-server-filesystem", "/srv"], "env": {"X": "1"}},
    "weather": {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer ..."}}
}}
```

Each server gets one connection task (the `mcp` SDK's client is built on anyio task groups, which must
be entered and left in the same task). It connects, lists every page of tools, then holds the
connection. A server that dies (or never starts) is survived: its tools disappear, calls to it fail
into words, and the task reconnects with a capped backoff. Tool names that clash across servers go
to the server listed first in the file (logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wren.tools.spec import ToolError, ToolSpec, ToolTimeout

log = logging.getLogger(__name__)

MAX_PAGES = 50
CONNECT_TIMEOUT_S = 20.0
BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)


class ServerConfigError(ValueError):
    """The mcpServers file cannot be used; the message says which entry and why."""


@dataclass
class ServerSpec:
    name: str
    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, name: str, entry: Any) -> ServerSpec:
        if not isinstance(entry, dict):
            raise ServerConfigError(f"mcpServers.{name}: must be an object")
        command, url = entry.get("command"), entry.get("url")
        if bool(command) == bool(url):
            raise ServerConfigError(
                f"mcpServers.{name}: needs exactly one of 'command' (stdio) or 'url' (http)"
            )
        kind = str(entry.get("type") or entry.get("transport") or ("stdio" if command else "http")).lower()
        if url and kind not in ("http", "streamable-http", "streamable_http", "streamablehttp"):
            raise ServerConfigError(
                f"mcpServers.{name}: transport {kind!r} is not supported (streamable HTTP only)"
            )
        args = entry.get("args", [])
        env = entry.get("env", {})
        headers = entry.get("headers", {})
        if not isinstance(args, list) or not isinstance(env, dict) or not isinstance(headers, dict):
            raise ServerConfigError(f"mcpServers.{name}: args must be a list, env and headers objects")
        return cls(
            name=name,
            command=str(command) if command else None,
            args=[str(a) for a in args],
            env={str(k): str(v) for k, v in env.items()},
            cwd=str(entry["cwd"]) if entry.get("cwd") else None,
            url=str(url) if url else None,
            headers={str(k): str(v) for k, v in headers.items()},
        )


def load_server_specs(path: str | Path) -> list[ServerSpec]:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ServerConfigError(f"MCP servers file not found: {path}") from None
    except ValueError as exc:
        raise ServerConfigError(f"{path}: not valid JSON ({exc})") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ServerConfigError(f"{path}: needs an object named 'mcpServers'")
    return [
        ServerSpec.parse(name, entry)
        for name, entry in servers.items()
        if not (isinstance(entry, dict) and entry.get("disabled") is True)
    ]


def _result_text(result: Any) -> str:
    texts = [getattr(item, "text", None) for item in (result.content or [])]
    texts = [t for t in texts if isinstance(t, str)]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content)
    return ""


class ServerConnection:
    """One configured MCP server: a task that keeps it connected, its tools, and calls into it."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.tools: list[ToolSpec] = []
        self._client: Any = None
        self._ready = asyncio.Event()
        self._broken = asyncio.Event()
        self._closing = False
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures = 0

    @property
    def connected(self) -> bool:
        return self._client is not None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"mcp:{self.spec.name}")

    async def wait_ready(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)
        return self._ready.is_set()

    async def close(self) -> None:
        self._closing = True
        self._stop.set()
        self._broken.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 10)
            except (TimeoutError, Exception):
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task

    def _target(self) -> tuple[Any, Any]:
        """What to hand `mcp.Client`, and an HTTP client to close afterwards (or None)."""
        if self.spec.command:
            from mcp.client.stdio import StdioServerParameters

            return StdioServerParameters(
                command=self.spec.command, args=self.spec.args, env=self.spec.env or None, cwd=self.spec.cwd
            ), None
        if self.spec.headers:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = create_mcp_http_client(headers=self.spec.headers)
            return streamable_http_client(str(self.spec.url), http_client=http), http
        return str(self.spec.url), None

    async def _run(self) -> None:
        from mcp import Client

        while not self._closing:
            http = None
            try:
                target, http = self._target()
                async with Client(target) as client:
                    self.tools = await self._list_tools(client)
                    self._client = client
                    self._failures = 0
                    self._broken.clear()
                    self._ready.set()
                    log.info("MCP server %s: %d tools", self.spec.name, len(self.tools))
                    await self._broken.wait()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # anyio wraps failures in exception groups
                log.warning("MCP server %s unavailable: %s", self.spec.name, _describe(exc))
            finally:
                self._client = None
                self.tools = []
                if http is not None:
                    with contextlib.suppress(Exception):
                        await http.aclose()
            if self._closing:
                break
            delay = BACKOFF_S[min(self._failures, len(BACKOFF_S) - 1)]
            self._failures += 1
            self._ready.set()  # "first attempt finished" for start(), connected or not
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    async def _list_tools(self, client: Any) -> list[ToolSpec]:
        tools: list[ToolSpec] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await asyncio.wait_for(client.list_tools(cursor=cursor), CONNECT_TIMEOUT_S)
            for tool in page.tools:
                tools.append(ToolSpec(
                    name=tool.name,
                    description=tool.description or "",
                    input_schema=dict(tool.input_schema or {"type": "object", "properties": {}}),
                    source=f"server:{self.spec.name}",
                ))
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    def _mark_broken(self) -> None:
        """Forget the connection at once (its tools vanish) and let the task reconnect."""
        self._client = None
        self.tools = []
        self._broken.set()

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> str:
        from mcp.shared.exceptions import MCPError

        client = self._client
        if client is None:
            raise ToolError(f"the {self.spec.name} server is not available")
        try:
            result = await asyncio.wait_for(client.call_tool(name, arguments), timeout)
        except TimeoutError:
            raise ToolTimeout(f"{name} did not answer within {timeout:g} seconds") from None
        except MCPError as exc:
            if exc.code == -32000 or "closed" in exc.error.message.lower():
                self._mark_broken()
                raise ToolError(f"the {self.spec.name} server went away") from None
            raise ToolError(exc.error.message) from None
        except (asyncio.CancelledError, ToolError):
            raise
        except Exception as exc:
            self._mark_broken()
            raise ToolError(f"the {self.spec.name} server failed ({_describe(exc)})") from None
        text = _result_text(result)
        if result.is_error:
            # The SDK prefixes the tool's own message; the message alone is what should be spoken.
            text = re.sub(r"^Error executing tool [^:]*:\s*", "", text)
            raise ToolError(text or "the tool reported an error")
        return text


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe(exc.exceptions[0])
    return f"{exc.__class__.__name__}: {exc}"


class ServerMcpTools:
    """All configured MCP servers as one tool source (first-listed server wins a name clash)."""

    def __init__(self, specs: list[ServerSpec], connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        self.connections = [ServerConnection(s) for s in specs]
        self.connect_timeout_s = connect_timeout_s
        self._reported: set[str] = set()

    @classmethod
    def from_file(cls, path: str | Path, mcp_config: Any = None) -> ServerMcpTools:
        return cls(load_server_specs(path))

    async def start(self) -> None:
        """Connect every server in parallel; one that does not come up is logged, never fatal."""
        for conn in self.connections:
            conn.start()
        await asyncio.gather(*(c.wait_ready(self.connect_timeout_s) for c in self.connections))

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections))

    def _owners(self) -> dict[str, ServerConnection]:
        owners: dict[str, ServerConnection] = {}
        for conn in self.connections:
            for tool in conn.tools:
                if tool.name in owners:
                    if tool.name not in self._reported:
                        self._reported.add(tool.name)
                        log.warning("MCP tool %r is served by %s and %s; %s wins (listed first)", tool.name,
                                    owners[tool.name].spec.name, conn.spec.name, owners[tool.name].spec.name)
                    continue
                owners[tool.name] = conn
        return owners

    @property
    def tools(self) -> list[ToolSpec]:
        owners = self._owners()
        return [t for conn in self.connections for t in conn.tools if owners.get(t.name) is conn]

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> str:
        conn = self._owners().get(name)
        if conn is None:
            raise ToolError(f"no server offers {name}")
        return await conn.call(name, arguments, timeout)
