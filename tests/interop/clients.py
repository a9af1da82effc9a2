"""Small xiaozhi clients for the interop tests, one per kind of third-party client.

Each one is written from the reference (/work/shared/reference/xiaozhi-protocol.md) and from how that
kind of client behaves on the wire, not from Wren's code:

- their JSON is written by hand, without `shared_protocol`. If the server and the client used the same
  codec, a bug in it would go unnoticed on both sides;
- they run on aiohttp's WebSocket client. The repo's own TestDevice uses `websockets`, so the server
  meets a second client implementation, and a test can send a WebSocket ping and see the pong
  (`autoping` is off; the client answers server pings itself, as the firmware does).

`XiaozhiClient` is the shared wire behaviour: a stock-firmware handshake and hello, `listen`, `abort`,
uplink Opus in `frame_ms` frames paced like a microphone, a tiny MCP server, and a log of everything
received with arrival times. It has the attributes `tests.server.helpers.assert_complete_reply` reads
(`session_id`, `decode_reply`, `summary`). The subclasses are the clients the tests imitate:

- `RealtimeClient`: opens the mic once (`listen start realtime`) and streams without a break, typed
  queries in between (py-xiaozhi style, or firmware with device-side AEC);
- `PartialMcpClient`: its MCP server handles `tools/list` and `tools/call`, but `initialize` either
  gets no answer or gets a JSON-RPC error;
- `BrowserClient`: a web page. Identity goes in the query string, the hello is minimal, and an empty
  binary frame marks the end of a recording.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import time
import urllib.parse
import uuid
from typing import Any

import aiohttp
import opuslib_next

from tests.server.helpers import words
from tests.support.received import Received, ReceivedLog, Reply
from tests.support.spoken import spoken_pcm

UPLINK_RATE = 16000
NO_REASON = object()  # abort() without a "reason" key (the firmware's button abort, reference §5.2)
CURRENT = object()  # a message's session_id: the one the server gave (the default)
ABSENT = object()  # a message without a session_id key (old clients, reference docs/protocol.md §4)


def heard(text: str | None) -> set[str]:
    """The words of an `stt` text, lower case, without punctuation or quotes around them. Moonshine
    sometimes wraps a transcript in stray quotes, e.g. `"'What day is it?'`."""
    return {w.strip("'") for w in words(text or "")} - {""}


def random_mac() -> str:
    return "02:00:00:" + ":".join(f"{b:02x}" for b in uuid.uuid4().bytes[:3])


def firmware_headers(device_id: str, client_id: str, token: str | None = None) -> dict[str, str]:
    """The handshake headers of the official firmware (reference §1.2)."""
    headers = {"Protocol-Version": "1", "Device-Id": device_id, "Client-Id": client_id}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def firmware_hello(frame_ms: int = 60) -> dict:
    """The device hello of firmware 2.x (reference §3.1), with the uplink frame duration it was built with."""
    return {
        "type": "hello", "version": 1, "features": {"mcp": True}, "transport": "websocket",
        "audio_params": {"format": "opus", "sample_rate": UPLINK_RATE, "channels": 1,
                         "frame_duration": frame_ms},
    }


def light_tool() -> dict:
    """A board tool in the firmware's style (reference §4.6, `self.lamp.*` / `self.light.*`): no arguments."""
    return {"name": "self.light.turn_on", "description": "Turn on the light.",
            "inputSchema": {"type": "object", "properties": {}}}


class XiaozhiClient(ReceivedLog):
    """A xiaozhi client on one aiohttp WebSocket: sends what a device sends, logs what it gets back."""

    def __init__(
        self,
        url: str,
        *,
        frame_ms: int = 60,
        headers: dict[str, str] | None = None,
        token: str | None = None,
        hello: dict | None = None,
        origin: str | None = None,
        tools: list[dict] | None = None,
    ) -> None:
        self.device_id = random_mac()
        self.client_id = str(uuid.uuid4())
        self.url = url
        self.frame_ms = frame_ms
        if headers is None:
            headers = firmware_headers(self.device_id, self.client_id, token)
        self.headers = headers
        self.hello = firmware_hello(frame_ms) if hello is None else hello
        self.origin = origin
        self.tools = tools or []
        self.session_id = ""
        self.server_hello: dict | None = None
        self._start_log()
        self.mcp_requests: list[tuple[float, dict]] = []  # (arrival, payload) of every server request
        self.tool_calls: list[dict] = []
        self._http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task | None = None
        self._encoder: Any = None

    # ---- connection ----------------------------------------------------------------------------------

    async def open(self) -> None:
        self._http = aiohttp.ClientSession()
        self.ws = await self._http.ws_connect(
            self.url, headers=self.headers, origin=self.origin, autoping=False, heartbeat=None,
            max_msg_size=0, timeout=aiohttp.ClientWSTimeout(ws_close=5),
        )
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def connect(self, timeout: float = 10.0) -> dict:
        """Open the socket, send the hello, wait for the server's hello (the device waits 10 s, §3.2)."""
        await self.open()
        await self.send_json(self.hello)
        hello = await self.wait_json(lambda m: m.get("type") == "hello", timeout)
        self.server_hello = hello
        self.session_id = hello.get("session_id", self.session_id)
        return hello

    async def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
        if self._http is not None:
            await self._http.close()

    async def __aenter__(self) -> XiaozhiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- sending -------------------------------------------------------------------------------------

    async def send_json(self, msg: dict) -> None:
        assert self.ws is not None
        await self.ws.send_str(json.dumps(msg, ensure_ascii=False, separators=(",", ":")))

    async def send_binary(self, data: bytes) -> None:
        assert self.ws is not None
        await self.ws.send_bytes(data)

    def _with_session(self, msg: dict, session_id: Any = CURRENT) -> dict:
        # The firmware puts session_id first (reference §5): {"session_id":…,"type":…,…}.
        if session_id is ABSENT:
            return dict(msg)
        return {"session_id": self.session_id if session_id is CURRENT else session_id, **msg}

    async def listen_start(self, mode: str) -> None:
        await self.send_json(self._with_session({"type": "listen", "state": "start", "mode": mode}))

    async def listen_stop(self) -> None:
        await self.send_json(self._with_session({"type": "listen", "state": "stop"}))

    async def detect(self, text: str, session_id: Any = CURRENT) -> None:
        """`listen detect`: a wake word, or (py-xiaozhi, xinnan) a typed query (reference §5.1)."""
        msg = {"type": "listen", "state": "detect", "text": text}
        await self.send_json(self._with_session(msg, session_id))

    async def abort(self, reason: Any = NO_REASON) -> None:
        msg: dict = {"type": "abort"}
        if reason is not NO_REASON:
            msg["reason"] = reason
        await self.send_json(self._with_session(msg))

    def encode(self, pcm_frame: bytes) -> bytes:
        if self._encoder is None:
            self._encoder = opuslib_next.Encoder(UPLINK_RATE, 1, opuslib_next.APPLICATION_VOIP)
        return bytes(self._encoder.encode(pcm_frame, UPLINK_RATE * self.frame_ms // 1000))

    def frames_of(self, pcm: bytes) -> list[bytes]:
        """16 kHz int16 PCM cut into `frame_ms` frames (the last one padded with silence)."""
        size = UPLINK_RATE * self.frame_ms // 1000 * 2
        if len(pcm) % size:
            pcm += bytes(size - len(pcm) % size)
        return [pcm[i : i + size] for i in range(0, len(pcm), size)]

    async def send_audio(self, pcm: bytes, realtime: bool = True) -> int:
        """Opus frames of `pcm`, one per `frame_ms` on absolute deadlines (a microphone), or a burst."""
        start = time.monotonic()
        frames = self.frames_of(pcm)
        for count, frame in enumerate(frames, 1):
            await self.send_binary(self.encode(frame))
            if realtime:
                delay = start + count * self.frame_ms / 1000 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
        return len(frames)

    async def say(self, text: str, realtime: bool = True) -> int:
        return await self.send_audio(spoken_pcm(text, UPLINK_RATE), realtime)

    async def send_silence(self, ms: int) -> int:
        return await self.send_audio(bytes(UPLINK_RATE * ms // 1000 * 2))

    # ---- the client's MCP server (reference §4.2-§4.5) -------------------------------------------------

    def answer_mcp(self, payload: dict) -> dict | None:
        """The reply to one server request, or None for no reply. A stock device's answers."""
        method, request_id = payload.get("method"), payload.get("id")
        if not isinstance(method, str) or method.startswith("notifications"):
            return None
        if not isinstance(request_id, int):
            return None  # the firmware drops requests without an integer id (§4.2)
        if method == "initialize":
            return {"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
                "serverInfo": {"name": "interop-client", "version": "1.0.0"}}}
        if method == "tools/list":
            # One page: no nextCursor at all on the last page (§4.4).
            return {"jsonrpc": "2.0", "id": request_id, "result": {"tools": self.tools}}
        if method == "tools/call":
            params = payload.get("params") or {}
            self.tool_calls.append(params)
            if any(t["name"] == params.get("name") for t in self.tools):
                return {"jsonrpc": "2.0", "id": request_id,
                        "result": {"content": [{"type": "text", "text": "true"}], "isError": False}}
            unknown = f"Unknown tool: {params.get('name')}"
            return {"jsonrpc": "2.0", "id": request_id, "error": {"message": unknown}}
        unsupported = f"Method not implemented: {method}"
        return {"jsonrpc": "2.0", "id": request_id, "error": {"message": unsupported}}

    async def _on_mcp(self, payload: dict, arrived: float) -> None:
        if "method" in payload:
            self.mcp_requests.append((arrived, payload))
        reply = self.answer_mcp(payload)
        if reply is not None:
            with contextlib.suppress(Exception):
                await self.send_json(self._with_session({"type": "mcp", "payload": reply}))

    # ---- receiving -----------------------------------------------------------------------------------

    async def _read(self) -> None:
        assert self.ws is not None
        try:
            while True:
                msg = await self.ws.receive()
                now = time.monotonic()
                if msg.type == aiohttp.WSMsgType.TEXT:
                    try:
                        data = json.loads(msg.data)
                    except ValueError:
                        self.received.append(Received(now, "text-invalid", payload=msg.data.encode()))
                    else:
                        self.received.append(Received(now, "json", msg=data))
                        mcp = _mcp_payload(data)
                        if mcp is not None:
                            await self._on_mcp(mcp, now)
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    self.received.append(Received(now, "audio", payload=msg.data))
                elif msg.type == aiohttp.WSMsgType.PING:
                    self.received.append(Received(now, "ping", payload=msg.data))
                    await self.ws.pong(msg.data)  # the firmware answers pings (reference §1.2)
                elif msg.type == aiohttp.WSMsgType.PONG:
                    self.received.append(Received(now, "pong", payload=msg.data))
                else:  # CLOSE (autoclose answers it), CLOSING, CLOSED, ERROR
                    if msg.type == aiohttp.WSMsgType.CLOSE:
                        self.close_code, self.close_reason = msg.data, msg.extra or ""
                    break
                self._new.set()
        finally:
            if self.close_code is None and self.ws.close_code is not None:
                self.close_code = self.ws.close_code
            self._ended(self.close_code, self.close_reason)

    async def wait_mcp_request(self, method: str, timeout: float) -> tuple[float, dict]:
        """(arrival, payload) of the first server MCP request for `method`."""
        def asked(m: dict) -> bool:
            return m.get("type") == "mcp" and (m.get("payload") or {}).get("method") == method

        await self.wait_json(asked, timeout)
        return next((t, p) for t, p in self.mcp_requests if p.get("method") == method)

    def decode_reply(self, reply: Reply) -> tuple[bytes, int]:
        """The reply's Opus as int16 PCM, decoded as the firmware does: at the server hello's rate (§3.2)."""
        params = (self.server_hello or {}).get("audio_params") or {}
        rate, frame_ms = params.get("sample_rate", 24000), params.get("frame_duration", 60)
        decoder = opuslib_next.Decoder(rate, 1)
        return b"".join(bytes(decoder.decode(f.payload, rate * frame_ms // 1000)) for f in reply.frames), rate



def _mcp_payload(data: Any) -> dict | None:
    if isinstance(data, dict) and data.get("type") == "mcp" and isinstance(data.get("payload"), dict):
        return data["payload"]
    return None


def is_stt(r: Received) -> bool:
    return bool(r.kind == "json" and r.msg and r.msg.get("type") == "stt")


class RealtimeClient(XiaozhiClient):
    """A client in realtime mode, e.g. py-xiaozhi in its realtime conversation mode, or firmware with
    device-side AEC (reference §5.1, §8.2). It sends `listen start realtime` once and streams the mic
    from then on: silence between utterances, and it keeps streaming while the server speaks. Its
    user can type queries (`listen detect` with text) at any time."""

    def __init__(self, url: str, **kw: Any) -> None:
        super().__init__(url, **kw)
        # Frames waiting for the mic; unbounded on purpose: a test queues one sentence at a time.
        self._queue: collections.deque[tuple[bytes, asyncio.Future[None] | None]] = collections.deque()
        self._mic: asyncio.Task | None = None
        self.frames_sent = 0

    async def open_microphone(self) -> None:
        await self.listen_start("realtime")
        self._mic = asyncio.get_running_loop().create_task(self._microphone())

    async def speak(self, text: str) -> None:
        """Put the words into the live mic stream; returns once their last frame has been sent."""
        frames = self.frames_of(spoken_pcm(text, UPLINK_RATE))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for frame in frames[:-1]:
            self._queue.append((frame, None))
        self._queue.append((frames[-1], done))
        await done

    async def _microphone(self) -> None:
        silence = bytes(UPLINK_RATE * self.frame_ms // 1000 * 2)
        start = time.monotonic()
        slot = 0
        while True:
            frame, done = self._queue.popleft() if self._queue else (silence, None)
            try:
                await self.send_binary(self.encode(frame))
            except Exception:
                return  # the socket is gone
            self.frames_sent += 1
            if done is not None and not done.done():
                done.set_result(None)
            slot += 1
            delay = start + slot * self.frame_ms / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

    async def close(self) -> None:
        if self._mic is not None:
            self._mic.cancel()
            with contextlib.suppress(BaseException):
                await self._mic
        await super().close()


class PartialMcpClient(XiaozhiClient):
    """A client with a partial MCP server: it handles `tools/list` and `tools/call` but not `initialize`.
    With `initialize="silent"` it never answers that request. With `initialize="error"` it answers with
    a JSON-RPC error, carrying the standard code this time; the firmware's own errors have no code,
    reference §4.2."""

    def __init__(self, url: str, initialize: str, **kw: Any) -> None:
        kw.setdefault("tools", [light_tool()])
        super().__init__(url, **kw)
        assert initialize in ("silent", "error")
        self.initialize = initialize

    def answer_mcp(self, payload: dict) -> dict | None:
        if payload.get("method") == "initialize":
            if self.initialize == "silent":
                return None
            return {"jsonrpc": "2.0", "id": payload.get("id"),
                    "error": {"code": -32601, "message": "Method not found: initialize"}}
        return super().answer_mcp(payload)


class BrowserClient(XiaozhiClient):
    """A web page talking to the server. A browser cannot set WebSocket headers, so the identity goes in
    the query string (reference §1.2, xinnan's fallback). Its hello has identity fields and features but
    no version, transport or audio_params. It records push-to-talk style (`listen start manual`) and marks
    the end of a recording with an empty binary frame instead of `listen stop`."""

    def __init__(self, url: str, token: str = "x", **kw: Any) -> None:
        super().__init__(url, headers={}, origin="http://localhost:8006", **kw)
        query = urllib.parse.urlencode(
            {"device-id": self.device_id, "client-id": self.client_id, "authorization": f"Bearer {token}"},
            quote_via=urllib.parse.quote,
        )
        self.url = f"{url}?{query}"
        self.hello = {"type": "hello", "device_id": self.device_id, "device_mac": self.device_id,
                      "token": token, "features": {"mcp": True, "emoji": True}}

    async def end_recording(self) -> None:
        await self.send_binary(b"")

    async def record(self, text: str) -> None:
        """One push-to-talk recording: start, the words in real time, the empty end-of-recording frame."""
        await self.listen_start("manual")
        await self.say(text)
        await self.end_recording()
