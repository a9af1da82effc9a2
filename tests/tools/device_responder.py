"""A scripted device MCP server speaking the exact xiaozhi device dialect (reference §4), for tests.

Only the ESP32 itself cannot exist here. The dialect is `shared_protocol.device_mcp.Server`, the one
the firmware's server is built on: the payload must be an object with jsonrpc 2.0; only requests
with a string method and an INTEGER id are answered (others are dropped silently); `notifications/*`
are ignored; errors carry a message and no code; `tools/list` pages are cut at about 8000 bytes with
`nextCursor` = the next tool's name, absent on the last page; argument binding checks JSON types and
integer ranges (`device_mcp.bind`). What is scripted here: the tools, their effect on `state`, tools
that hang, and replies that come later, from the device main loop. Frames go through the real
`shared_protocol` encoder/parser, as on the wire.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from shared_protocol import device_mcp, messages

_PADDING = (
    " Use this tool only when the user clearly asks for it; otherwise describe the current state first."
    " The change takes effect immediately and is kept after a restart of the device."
)


def _int_prop(lo: int, hi: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": lo, "maximum": hi}


def builtin_tools() -> list[dict[str, Any]]:
    tools = [
        {
            "name": "self.get_device_status",
            "description": (
                "Provides the real-time information of the device, including the current status of "
                "the audio speaker, screen, battery, network, etc.\nUse this tool for: \n"
                "1. Answering questions about current condition "
                "(e.g. what is the current volume of the audio speaker?)\n"
                "2. As the first step to control the device "
                "(e.g. turn up / down the volume of the audio speaker, etc.)"
            ),
            "inputSchema": {"type": "object", "properties": {}},
        },
        {
            "name": "self.audio_speaker.set_volume",
            "description": "Set the volume of the audio speaker. If the current volume is unknown, you must "
            "call `self.get_device_status` tool first and then call this tool.",
            "inputSchema": {
                "type": "object",
                "properties": {"volume": _int_prop(0, 100)},
                "required": ["volume"],
            },
        },
        {
            "name": "self.screen.set_brightness",
            "description": "Set the brightness of the screen.",
            "inputSchema": {
                "type": "object",
                "properties": {"brightness": _int_prop(0, 100)},
                "required": ["brightness"],
            },
        },
        {
            "name": "self.screen.set_theme",
            "description": "Set the theme of the screen. The theme can be `light` or `dark`.",
            "inputSchema": {
                "type": "object",
                "properties": {"theme": {"type": "string"}},
                "required": ["theme"],
            },
        },
        {
            "name": "self.light.set_rgb",
            "description": "Set the colour of the RGB light." + _PADDING,
            "inputSchema": {
                "type": "object",
                "properties": {"r": _int_prop(0, 255), "g": _int_prop(0, 255), "b": _int_prop(0, 255)},
                "required": ["r", "g", "b"],
            },
        },
    ]
    for part in (
        "head",
        "left_arm",
        "right_arm",
        "left_leg",
        "right_leg",
        "tail",
        "ears",
        "eyes",
        "chassis",
        "wheels",
        "lamp",
        "fan",
        "pump",
        "door",
        "window",
        "curtain",
    ):
        tools.append(
            {
                "name": f"self.{part}.move",
                "description": f"Move the {part.replace('_', ' ')} of the robot to a position in degrees."
                + _PADDING,
                "inputSchema": {
                    "type": "object",
                    "properties": {"angle": _int_prop(0, 180), "speed": {"type": "integer", "default": 50}},
                    "required": ["angle"],
                },
            }
        )
    tools.append(
        {
            "name": "self.reboot",
            "description": "Reboot the system.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"audience": ["user"]},
        }
    )
    return tools


class ScriptedDevice(device_mcp.Server):
    """Answers MCP requests like the firmware; `send_to_server` receives encoded `mcp` frames."""

    def __init__(self, tools: list[dict[str, Any]] | None = None, session_id: str = "sess-1") -> None:
        super().__init__("test-board", "1.9.0")
        self.tools = tools if tools is not None else builtin_tools()
        self.session_id = session_id
        self.state = {"volume": 70, "brightness": 75, "theme": "light", "rgb": [0, 0, 0]}
        self.requests: list[dict[str, Any]] = []  # every payload received (answered or dropped)
        self.hang: set[str] = set()  # tool names that never answer
        self.client: Any = None  # the DeviceMcpClient to deliver replies to
        self._tasks: set[asyncio.Task[None]] = set()
        self._hung = False

    # the server side's `send`: wrap in the envelope, go through the wire encoder, deliver
    async def receive_from_server(self, payload: dict[str, Any]) -> None:
        frame = messages.encode(messages.mcp(payload))
        msg = messages.parse(frame)
        task = asyncio.get_running_loop().create_task(self._on_payload(msg["payload"]))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _on_payload(self, payload: Any) -> None:
        self.requests.append(payload)
        self._hung = False
        reply = self.handle(payload)
        if reply is None or self._hung:
            return  # dropped, a notification, or a hung tool: no reply at all
        await asyncio.sleep(0.01)  # replies come later, from the device main loop
        frame = messages.encode(messages.mcp(reply, self.session_id))
        self.client.handle(messages.parse(frame)["payload"])

    # ---- device_mcp.Server ---------------------------------------------------------------------------

    def describe_tools(self) -> list[dict[str, Any]]:
        return self.tools

    def call_tool(self, name: str, arguments: dict[str, Any] | None) -> str:
        tool = next((t for t in self.tools if t["name"] == name), None)
        if tool is None:
            raise device_mcp.CallError(device_mcp.UNKNOWN_TOOL + name)
        properties = tool["inputSchema"].get("properties", {})
        args = {prop: device_mcp.bind(prop, schema, arguments) for prop, schema in properties.items()}
        if name in self.hang:
            self._hung = True  # a hung tool: does nothing and never answers
            return "true"
        return self._run(name, args)

    def _run(self, name: str, args: dict[str, Any]) -> str:
        if name == "self.get_device_status":
            return json.dumps(
                {
                    "audio_speaker": {"volume": self.state["volume"]},
                    "screen": {"brightness": self.state["brightness"], "theme": self.state["theme"]},
                    "battery": {"level": 80, "charging": False},
                    "network": {"type": "wifi", "ssid": "lab", "signal": "strong"},
                }
            )
        if name == "self.audio_speaker.set_volume":
            self.state["volume"] = args["volume"]
            return "true"
        if name == "self.screen.set_brightness":
            self.state["brightness"] = args["brightness"]
            return "true"
        if name == "self.screen.set_theme":
            if args["theme"] not in ("light", "dark"):
                return "false"
            self.state["theme"] = args["theme"]
            return "true"
        if name == "self.light.set_rgb":
            self.state["rgb"] = [args["r"], args["g"], args["b"]]
            return "true"
        return "true"

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
