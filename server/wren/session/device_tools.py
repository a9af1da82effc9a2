"""What one device can do, as the agent and the recogniser see it: its MCP tools and the phrase bias
built from them (and from names the person taught).

The device's MCP client starts after the first hello that announces `features.mcp`; until its tool list
arrives the agent sees no device tools and the bias holds the built-in phrases only. The bias is
refreshed after every turn (a name taught in this turn is recognised from the next one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from wren.session.recognition_bias import RecognitionBias
from wren.session.services import ConnectionClosed
from wren.tools.device_mcp import DeviceMcpClient
from wren.tools.spec import ToolSpec

log = logging.getLogger(__name__)


class DeviceTools:
    def __init__(self, agent: Any, session_key: str, bias_setting: str, name: str,
                 send_mcp: Callable[[dict], Awaitable[None]], max_tools: int = 128,
                 max_tool_bytes: int = 256 * 1024) -> None:
        self._agent = agent
        self._max_tools = max_tools  # [limits] device_tools / device_tool_bytes
        self._max_tool_bytes = max_tool_bytes
        self._name = name
        self._send_mcp = send_mcp
        self.mcp: DeviceMcpClient | None = None
        self.bias = RecognitionBias(agent, session_key, self.specs, bias_setting, agent.engine.name)
        self._tasks: set[asyncio.Task[Any]] = set()  # the MCP start-up and bias refreshes: short jobs
        self._closed = False

    def specs(self) -> list[ToolSpec]:
        return list(self.mcp.tools) if self.mcp is not None else []

    def client(self) -> DeviceMcpClient | None:
        """What the agent calls device tools through (None: this device serves none)."""
        return self.mcp

    def handle(self, payload: dict) -> None:
        if self.mcp is not None:
            self.mcp.handle(payload)
        else:
            log.debug("%s: mcp frame without a device MCP client; ignored", self._name)

    def start_mcp(self) -> None:
        if self.mcp is not None or self._closed:
            return
        self.mcp = client = DeviceMcpClient(self._send_mcp, max_tools=self._max_tools,
                                            max_tool_bytes=self._max_tool_bytes)

        async def initialise() -> None:
            try:
                await client.start()
                log.info("%s: device MCP ready, %d tools", self._name, len(client.tools))
            except ConnectionClosed:
                pass
            except Exception as exc:
                log.warning("%s: device MCP initialisation failed: %s", self._name, exc)

        self._spawn(initialise(), "mcp")

    def refresh_bias(self) -> None:
        self._spawn(self.bias.refresh(), "bias")

    def _spawn(self, job: Any, what: str) -> None:
        if self._closed:
            job.close()
            return
        task = asyncio.get_running_loop().create_task(job, name=f"{self._name}:{what}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.mcp is not None:
            self.mcp.close()
