"""In-test tool sources and the xiaozhi built-in device tool list (§4.6)."""

from __future__ import annotations

import asyncio
from typing import Any

from wren.tools.spec import ToolSpec


class RecordingTools:
    """A tool source for engine tests: fixed specs; calls are recorded and answered from a table.
    (The real device dialect is exercised in tests/tools against DeviceMcpClient.)"""

    def __init__(self, specs: list[dict[str, Any]], answers: dict[str, Any] | None = None) -> None:
        self.tools = [ToolSpec.from_mcp(s, "device") for s in specs]
        self.answers = answers or {}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> str:
        self.calls.append((name, arguments))
        answer = self.answers.get(name, "true")
        if isinstance(answer, Exception):
            raise answer
        return answer


XIAOZHI_TOOLS = [
    {
        "name": "self.get_device_status",
        "description": "Provides the real-time information of the device, including the current status of "
        "the audio speaker, screen, battery, network, etc.\nUse this tool for: \n1. Answering questions "
        "about current condition (e.g. what is the current volume of the audio speaker?)",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "self.audio_speaker.set_volume",
        "description": "Set the volume of the audio speaker. If the current volume is unknown, you must call "
        "`self.get_device_status` tool first and then call this tool.",
        "inputSchema": {
            "type": "object",
            "properties": {"volume": {"type": "integer", "minimum": 0, "maximum": 100}},
            "required": ["volume"],
        },
    },
    {
        "name": "self.screen.set_brightness",
        "description": "Set the brightness of the screen.",
        "inputSchema": {
            "type": "object",
            "properties": {"brightness": {"type": "integer", "minimum": 0, "maximum": 100}},
            "required": ["brightness"],
        },
    },
    {
        "name": "self.light.set_rgb",
        "description": "Set the colour of the RGB light.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "r": {"type": "integer", "minimum": 0, "maximum": 255},
                "g": {"type": "integer", "minimum": 0, "maximum": 255},
                "b": {"type": "integer", "minimum": 0, "maximum": 255},
            },
            "required": ["r", "g", "b"],
        },
    },
]

DEVICE_STATUS = (
    '{"audio_speaker":{"volume":70},"screen":{"brightness":75,"theme":"light"},'
    '"battery":{"level":80,"charging":false},"network":{"type":"wifi","ssid":"x","signal":"strong"}}'
)


class BlockingTools(RecordingTools):
    """Tool calls wait until `release` is set, so a turn can be held mid-way on purpose."""

    def __init__(self) -> None:
        super().__init__(XIAOZHI_TOOLS)
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = 0

    async def call(self, name: str, arguments: dict[str, Any], timeout: float) -> str:
        self.calls.append((name, arguments))
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return "true"
