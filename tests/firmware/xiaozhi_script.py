"""A scripted xiaozhi server for firmware tests: each test writes its own handler with these helpers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import numpy as np
import websockets

SESSION = "sess-0001"
HELLO = {
    "type": "hello",
    "transport": "websocket",
    "session_id": SESSION,
    "audio_params": {"format": "pcm", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
}
FRAME_BYTES = 1920  # 60 ms of 16 kHz int16 mono


def pcm_frame(value: int) -> bytes:
    return np.full(FRAME_BYTES // 2, value, dtype="<i2").tobytes()


class Conn:
    """One device connection: JSON messages in order, uplink audio collected, helpers to answer."""

    def __init__(self, ws: websockets.ServerConnection) -> None:
        self.ws = ws
        self.messages: list[dict[str, Any]] = []
        self.audio = bytearray()
        self.audio_frames = 0
        self.headers = dict(ws.request.headers)

    async def next_json(self, timeout: float = 20.0, **match: Any) -> dict[str, Any]:
        """The next text message whose fields equal `match`; audio frames on the way are collected."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no message matching {match}; got {self.messages}")
            data = await asyncio.wait_for(self.ws.recv(), left)
            if isinstance(data, bytes):
                self.audio += data
                self.audio_frames += 1
                continue
            msg = json.loads(data)
            self.messages.append(msg)
            if all(msg.get(k) == v for k, v in match.items()):
                return msg

    async def collect_audio(self, frames: int, timeout: float = 20.0) -> None:
        target = self.audio_frames + frames
        while self.audio_frames < target:
            data = await asyncio.wait_for(self.ws.recv(), timeout)
            if isinstance(data, bytes):
                self.audio += data
                self.audio_frames += 1
            else:
                self.messages.append(json.loads(data))

    async def drain(self) -> None:
        """Keep reading (and collecting) until the device closes: an unread socket would back-pressure
        the device, and its close frame would never be read."""
        try:
            async for data in self.ws:
                if isinstance(data, bytes):
                    self.audio += data
                    self.audio_frames += 1
                else:
                    self.messages.append(json.loads(data))
        except websockets.ConnectionClosed:
            pass

    async def send(self, msg: dict[str, Any] | str) -> None:
        await self.ws.send(msg if isinstance(msg, str) else json.dumps(msg))

    async def hello(self, reply: dict[str, Any] | None = None) -> dict[str, Any]:
        device_hello = await self.next_json(type="hello")
        await self.send(HELLO if reply is None else reply)
        return device_hello

    async def speak(self, frames: list[bytes], paced: bool = True) -> None:
        for f in frames:
            await self.ws.send(f)
            if paced:
                await asyncio.sleep(0.06)

    async def tts(self, state: str, **extra: Any) -> None:
        await self.send({"type": "tts", "state": state, "session_id": SESSION, **extra})


async def serve(handler, port: int = 0):
    """websockets server on loopback with library pings off, like a xiaozhi server should (§10 row 2)."""
    return await websockets.serve(handler, "127.0.0.1", port, ping_interval=None, max_size=2**20)


@contextlib.asynccontextmanager
async def serving(handler, port: int = 0):
    """`serve` for the length of a block: yields the bound port, always closes the server."""
    server = await serve(handler, port)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()
