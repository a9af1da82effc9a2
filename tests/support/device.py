"""A CPython test device: speaks the xiaozhi protocol through shared_protocol over a real WebSocket.

It does what a stock device does on the wire: handshake headers (or query parameters), hello,
`listen` start/stop/detect, `abort`, uplink audio in real-time-paced 60 ms frames (Opus, or PCM like
the MicroPython firmware), a tiny device MCP server (`shared_protocol.device_mcp.Server`: initialize,
paged tools/list, tools/call), and a receiver that records everything the server sends with arrival
times and decodes the reply audio.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.parse
import uuid
from typing import Any

import opuslib_next
import websockets

from shared_protocol import audio, device_mcp, messages
from tests.support.received import Received, ReceivedLog, Reply

FRAME_MS = 60

def _tool(name: str, description: str, properties: dict | None = None) -> dict:
    schema: dict = {"type": "object", "properties": properties or {}}
    if properties:
        schema["required"] = list(properties)
    return {"name": name, "description": description, "inputSchema": schema}


# The official firmware's common tools (reference §4.6), with descriptions in the same spirit.
DEVICE_TOOLS = [
    _tool("self.get_device_status", "Provides the real-time information of the device, including the "
          "current status of the audio speaker, screen, battery and network."),
    _tool("self.audio_speaker.set_volume", "Set the volume of the audio speaker.",
          {"volume": {"type": "integer", "minimum": 0, "maximum": 100}}),
    _tool("self.screen.set_brightness", "Set the brightness of the screen.",
          {"brightness": {"type": "integer", "minimum": 0, "maximum": 100}}),
    _tool("self.screen.set_theme", "Set the theme of the screen, light or dark.",
          {"theme": {"type": "string"}}),
    _tool("self.camera.take_photo", "Take a photo and explain what is in it.",
          {"question": {"type": "string"}}),
    _tool("self.system.reconfigure_wifi", "Reboot the device and enter the WiFi configuration mode."),
]


class _DeviceTools(device_mcp.Server):
    """The test device's MCP server: records every call and answers with canned texts."""

    max_page_bytes = 600  # small pages, so every server paging loop runs several rounds

    def __init__(self, tools: list[dict], calls: list[dict]) -> None:
        super().__init__("wren-test-device", "1.0.0")
        self.tools = tools
        self.calls = calls

    def describe_tools(self) -> list[dict]:
        return self.tools

    def call_tool(self, name: str, arguments: dict | None) -> str:
        self.calls.append({"name": name, "arguments": arguments} if arguments is not None else {"name": name})
        if name == "self.get_device_status":
            return '{"audio_speaker":{"volume":70},"battery":{"level":80,"charging":false}}'
        return "true"


class TestDevice(ReceivedLog):
    __test__ = False  # not a pytest class

    def __init__(
        self,
        url: str,
        device_id: str | None = None,
        client_id: str | None = None,
        *,
        token: str | None = None,
        protocol_version: int = 1,
        audio_format: str = "opus",
        sample_rate: int = 16000,
        mcp: bool = True,
        use_query: bool = False,
        send_identity: bool = True,
        tools: list[dict] | None = None,
        tool_delay: float = 0.0,
        ssl_context: Any = None,
    ) -> None:
        self.url = url
        self.ssl_context = ssl_context  # for wss:// (a test's own CA)
        self.device_id = device_id or "02:00:00:" + ":".join(f"{b:02x}" for b in uuid.uuid4().bytes[:3])
        self.client_id = client_id or str(uuid.uuid4())
        self.token = token
        self.protocol_version = protocol_version
        self.audio_format = audio_format
        self.sample_rate = sample_rate
        self.mcp = mcp
        self.tools = DEVICE_TOOLS if tools is None else tools
        self.tool_delay = tool_delay  # seconds before a tools/call is answered (a slow device)
        self._background: set[asyncio.Task] = set()
        self.use_query = use_query
        self.send_identity = send_identity
        self.ws: Any = None
        self.session_id = ""
        self.server_hello: dict | None = None
        self._start_log()
        self.tool_calls: list[dict] = []
        self.mcp_ready = asyncio.Event()  # the server has listed every tools/list page
        self._mcp = _DeviceTools(self.tools, self.tool_calls)
        self._reader: asyncio.Task | None = None
        self._encoder = None

    # ---- connection --------------------------------------------------------------------------------

    def _headers_and_url(self) -> tuple[dict[str, str], str]:
        identity = {}
        if self.send_identity:
            identity = {"Device-Id": self.device_id, "Client-Id": self.client_id,
                        "Protocol-Version": str(self.protocol_version)}
            if self.token is not None:
                identity["Authorization"] = f"Bearer {self.token}"
        if not self.use_query:
            return identity, self.url
        query = urllib.parse.urlencode({k.lower(): v for k, v in identity.items()})
        return {}, f"{self.url}?{query}"

    async def open(self) -> None:
        headers, url = self._headers_and_url()
        tls = {"ssl": self.ssl_context} if self.ssl_context is not None else {}
        self.ws = await websockets.connect(url, additional_headers=headers, max_size=None, ping_interval=None,
                                           open_timeout=10, **tls)
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def connect(self, timeout: float = 10.0) -> dict:
        """Open the socket, send hello, and wait for the server hello."""
        await self.open()
        return await self.connect_after_open(timeout)

    async def connect_after_open(self, timeout: float = 10.0) -> dict:
        """Send hello on an already open socket and wait for the server hello."""
        await self.send_json(messages.hello_device(
            version=self.protocol_version,
            features={"mcp": self.mcp},
            audio_params=messages.audio_params(self.audio_format, self.sample_rate, 1, FRAME_MS),
        ))
        hello = await self.wait_json(lambda m: m.get("type") == "hello", timeout)
        self.server_hello = hello
        self.session_id = hello["session_id"]
        return hello

    async def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
        for task in list(self._background):
            task.cancel()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader

    async def __aenter__(self) -> TestDevice:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- sending -------------------------------------------------------------------------------------

    async def send_json(self, msg: dict) -> None:
        await self.ws.send(messages.encode(msg))

    async def send_text(self, text: str) -> None:
        await self.ws.send(text)

    async def send_binary(self, data: bytes) -> None:
        await self.ws.send(data)

    async def listen_start(self, mode: str) -> None:
        await self.send_json(messages.listen_start(self.session_id, mode))

    async def listen_stop(self) -> None:
        await self.send_json(messages.listen_stop(self.session_id))

    async def detect(self, text: str) -> None:
        await self.send_json(messages.listen_detect(self.session_id, text))

    async def abort(self, reason: str | None = None) -> None:
        await self.send_json(messages.abort(self.session_id, reason))

    def _encode(self, pcm_frame: bytes) -> bytes:
        if self.audio_format == "pcm":
            return pcm_frame
        if self._encoder is None:
            self._encoder = opuslib_next.Encoder(self.sample_rate, 1, opuslib_next.APPLICATION_VOIP)
        return bytes(self._encoder.encode(pcm_frame, self.sample_rate * FRAME_MS // 1000))

    async def stream_pcm(self, pcm: bytes, realtime: bool = True) -> int:
        """Send int16 mono PCM at the device rate as 60 ms frames, paced like a microphone."""
        frame_bytes = self.sample_rate * FRAME_MS // 1000 * 2
        if len(pcm) % frame_bytes:
            pcm += bytes(frame_bytes - len(pcm) % frame_bytes)
        start = time.monotonic()
        count = 0
        for offset in range(0, len(pcm), frame_bytes):
            packet = self._encode(pcm[offset : offset + frame_bytes])
            await self.send_binary(audio.pack(self.protocol_version, packet))
            count += 1
            if realtime:
                delay = start + count * FRAME_MS / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        return count

    async def stream_packets(
        self, packets: Any, realtime: bool = True, sent_times: list[float] | None = None,
        lags: list[float] | None = None,
    ) -> int:
        """Send pre-encoded 60 ms packets (an iterable, e.g. a long room-noise + utterance timeline).

        Paced on absolute deadlines (no drift). A `None` item is a slot where the microphone is not
        uploading (the device is speaking): nothing is sent but the clock moves on. Every real send
        time is appended to `sent_times` (monotonic) and its lateness against its slot (s) to `lags`.
        """
        start = time.monotonic()
        slot = count = 0
        for packet in packets:
            if realtime:
                delay = start + slot * FRAME_MS / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            slot += 1
            if packet is None:
                continue
            await self.send_binary(audio.pack(self.protocol_version, packet))
            now = time.monotonic()
            if sent_times is not None:
                sent_times.append(now)
            if lags is not None:
                lags.append(now - (start + (slot - 1) * FRAME_MS / 1000))
            count += 1
        return count

    async def stream_silence(self, ms: int, realtime: bool = True) -> int:
        return await self.stream_pcm(bytes(self.sample_rate * ms // 1000 * 2), realtime)

    # ---- receiving -----------------------------------------------------------------------------------

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                now = time.monotonic()
                if isinstance(data, bytes):
                    payload, _ts = audio.unpack(self.protocol_version, data)
                    self.received.append(Received(now, "audio", payload=payload))
                else:
                    try:
                        msg = json.loads(data)
                    except ValueError:
                        self.received.append(Received(now, "text-invalid", payload=data.encode()))
                    else:
                        self.received.append(Received(now, "json", msg=msg))
                        if msg.get("type") == "mcp":
                            await self._answer_mcp(msg.get("payload") or {})
                self._new.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            code = self.ws.close_code if self.ws is not None else None
            self._ended(code, (self.ws.close_reason or "") if code is not None else "")

    async def _answer_mcp(self, payload: dict) -> None:
        reply = self._mcp.handle(payload)
        if reply is None:
            return
        method = payload["method"]
        if method == device_mcp.TOOLS_LIST and "nextCursor" not in reply.get("result", {}):
            self.mcp_ready.set()
        if method == device_mcp.TOOLS_CALL and self.tool_delay:
            task = asyncio.get_running_loop().create_task(self._reply_later(reply, self.tool_delay))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            return
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.send_json(messages.mcp(reply, self.session_id))

    async def _reply_later(self, reply: dict, delay: float) -> None:
        await asyncio.sleep(delay)
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.send_json(messages.mcp(reply, self.session_id))

    def decode_reply(self, reply: Reply) -> tuple[bytes, int]:
        """The reply's audio as int16 PCM at the downlink rate announced in the server hello."""
        assert self.server_hello is not None
        rate, frame_ms = messages.downlink_audio(self.server_hello)
        if self.server_hello["audio_params"].get("format") == "pcm":
            return b"".join(f.payload for f in reply.frames), rate
        decoder = opuslib_next.Decoder(rate, 1)
        samples = rate * frame_ms // 1000
        return b"".join(bytes(decoder.decode(f.payload, samples)) for f in reply.frames), rate
