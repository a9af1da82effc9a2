"""MCP client for the tools a device serves over the xiaozhi `mcp` message (reference §4).

The device's dialect (`shared_protocol.device_mcp`, which the firmware's server uses too), followed
exactly: integer request ids only (anything else is dropped silently by the device); `initialize`
uses id 1 and every later request takes ids from a separate range starting at 10000, so a late
reply can never be mistaken for another; `tools/list` is paged with `cursor`/`nextCursor` until
`nextCursor` is absent; errors carry a `message` and usually no `code`; replies are asynchronous
and may arrive interleaved with other traffic.

`send(payload)` is supplied by the device session and wraps the payload in the `mcp` envelope;
the session feeds every incoming `mcp` payload to `handle()`.

Bounded: at most `max_tools` tools and `max_tool_bytes` of their JSON (`[limits] device_tools`,
`device_tool_bytes`) are taken; past either, the rest of the list is ignored with a warning and no further
page is asked for.

Lenient: a device whose `initialize` fails (an error reply, or none within `INITIALIZE_TIMEOUT_S`: one
third-party client reads `params.capabilities.vision.url` unchecked and never answers) still has its tools
listed; `initialize` only tells us the device's name, which nothing depends on.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from shared_protocol import device_mcp, jsonrpc
from shared_protocol.errors import ProtocolError
from wren.tools.spec import ToolError, ToolSpec, ToolTimeout

log = logging.getLogger(__name__)

INITIALIZE_ID = 1
FIRST_CALL_ID = 10000
MAX_PAGES = 64  # a device that keeps returning cursors cannot keep us listing forever
INITIALIZE_TIMEOUT_S = 3.0  # a device answers initialize at once; past this, list its tools anyway
PROTOCOL_VERSION = device_mcp.PROTOCOL_VERSION

Send = Callable[[dict[str, Any]], Awaitable[None]]


class DeviceMcpClient:
    def __init__(
        self,
        send: Send,
        *,
        timeout: float = 10.0,
        vision_url: str | None = None,
        vision_token: str | None = None,
        client_name: str = "Wren",
        client_version: str = "0.1.0",
        max_tools: int = 128,
        max_tool_bytes: int = 256 * 1024,
    ) -> None:
        self._send = send
        self.max_tools = max_tools
        self.max_tool_bytes = max_tool_bytes
        self.timeout = timeout
        self._vision = {k: v for k, v in (("url", vision_url), ("token", vision_token)) if v}
        self._client_info = {"name": client_name, "version": client_version}
        self._ids = itertools.count(FIRST_CALL_ID)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._closed = False
        self.tools: list[ToolSpec] = []
        self.server_info: dict[str, Any] = {}

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def calls_in_flight(self) -> int:
        """Requests sent to the device whose reply has not come (nor failed, nor timed out) yet."""
        return len(self._pending)

    async def start(self) -> list[ToolSpec]:
        """`initialize`, then every page of `tools/list`; returns (and keeps) the AI-visible tools."""
        capabilities: dict[str, Any] = {"vision": dict(self._vision)} if self._vision else {}
        params = {"protocolVersion": PROTOCOL_VERSION, "capabilities": capabilities,
                  "clientInfo": self._client_info}
        try:
            init = await self._request(device_mcp.INITIALIZE, params, request_id=INITIALIZE_ID,
                                       timeout=min(self.timeout, INITIALIZE_TIMEOUT_S))
        except ToolError as exc:  # ToolTimeout included
            if self._closed:
                raise
            log.warning("device MCP initialize failed (%s); listing its tools anyway", exc)
            init = None
        info = init.get("serverInfo") if isinstance(init, dict) else None
        self.server_info = info if isinstance(info, dict) else {}
        await self._send(jsonrpc.notification(device_mcp.INITIALIZED))  # the device ignores it
        tools: list[ToolSpec] = []
        cursor = ""
        seen: set[str] = set()
        size = 0
        for _ in range(MAX_PAGES):
            page = await self._request(device_mcp.TOOLS_LIST, {"cursor": cursor, "withUserTools": False})
            items = page.get("tools") if isinstance(page, dict) else None
            if not isinstance(items, list):
                raise ToolError("the device sent a tools/list page without a tools list")
            full = False
            for item in items:
                if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                    log.warning("device listed a malformed tool: %r", str(item)[:200])
                    continue
                if device_mcp.is_user_only(item):
                    continue  # meant for companion apps, not the assistant
                size += len(json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode())
                if len(tools) >= self.max_tools or size > self.max_tool_bytes:
                    full = True
                    break
                tools.append(ToolSpec.from_mcp(item, "device"))
            if full:
                log.warning("device lists more tools than the limits (%d tools, %d bytes of JSON); "
                            "taking the first %d, ignoring the rest",
                            self.max_tools, self.max_tool_bytes, len(tools))
                break
            next_cursor = page.get("nextCursor")  # absent on the last page (§4.4)
            if not isinstance(next_cursor, str) or not next_cursor:
                break
            if next_cursor in seen:
                log.warning("device repeated tools/list cursor %r; stopping", next_cursor)
                break
            seen.add(next_cursor)
            cursor = next_cursor
        else:
            log.warning("device tools/list still paging after %d pages; stopping", MAX_PAGES)
        self.tools = tools
        log.info("device tools: %s", ", ".join(t.name[:64] for t in tools) or "none")
        return tools

    async def call(self, name: str, arguments: dict[str, Any], timeout: float | None = None) -> str:
        """Call a device tool; returns its text, raises ToolError (device message) or ToolTimeout."""
        result = await self._request(device_mcp.TOOLS_CALL, {"name": name, "arguments": arguments},
                                     timeout=timeout)
        try:
            text = device_mcp.result_text(result)
        except ProtocolError as exc:
            raise ToolError(f"the device sent an unreadable result ({exc})") from None
        if isinstance(result, dict) and result.get("isError") is True:
            raise ToolError(text)
        return text

    def handle(self, payload: Any) -> None:
        """Feed one incoming `mcp` payload (responses resolve calls; device requests are refused)."""
        try:
            kind = jsonrpc.classify(payload)
        except ProtocolError as exc:
            log.warning("ignoring malformed device MCP payload: %s", exc)
            return
        if kind in (jsonrpc.RESPONSE, jsonrpc.ERROR):
            future = self._pending.pop(payload.get("id"), None)  # type: ignore[arg-type]
            if future is None:
                log.info("device MCP reply for unknown or expired id %r", payload.get("id"))
                return
            if not future.done():
                future.set_result(payload)
        elif kind == jsonrpc.REQUEST:
            # Device-initiated requests are allowed by the wire (§4.8) but we serve none: say so.
            reply = jsonrpc.error(payload["id"], f"Method not supported: {payload['method']}")
            task = asyncio.get_running_loop().create_task(self._send_quietly(reply))
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)
        else:
            log.debug("device MCP notification %s", payload.get("method"))

    def close(self, reason: str = "the device disconnected") -> None:
        """Fail every pending call; later calls fail at once."""
        self._closed = True
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(ToolError(reason))

    async def _send_quietly(self, payload: dict[str, Any]) -> None:
        try:
            await self._send(payload)
        except Exception as exc:
            log.info("could not answer a device MCP request: %s", exc)

    async def _request(
        self,
        method: str,
        params: dict[str, Any],
        *,
        request_id: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        if self._closed:
            raise ToolError("the device is not connected")
        msg_id = next(self._ids) if request_id is None else request_id
        timeout = self.timeout if timeout is None else timeout
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[msg_id] = future
        try:
            try:
                await self._send(jsonrpc.request(msg_id, method, params))
            except Exception as exc:
                raise ToolError(f"could not reach the device ({exc})") from None
            try:
                reply = await asyncio.wait_for(future, timeout)
            except TimeoutError:
                raise ToolTimeout(f"the device did not answer {method} in time") from None
        finally:
            if self._pending.get(msg_id) is future:
                del self._pending[msg_id]
        if jsonrpc.classify(reply) == jsonrpc.ERROR:
            raise ToolError(jsonrpc.error_message(reply) or "the device reported an error")
        return reply.get("result")
