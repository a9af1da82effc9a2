"""What a test client received, and waiting on it: shared by `TestDevice` (tests/support/device.py, on
`websockets`) and the interop clients (tests/interop/clients.py, on aiohttp), so both wait, collect replies
and report what they got the same way."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FRAME_MS = 60


@dataclass
class Received:
    t: float  # monotonic arrival time
    kind: str  # "json", "audio", "text-invalid" (or the client's own kinds: "ping", "pong")
    msg: dict | None = None
    payload: bytes = b""


@dataclass
class Reply:
    """Everything between one `tts start` and its `tts stop` (plus the `stt` just before it)."""

    stt: str | None
    events: list[Received]
    sentences: list[str] = field(default_factory=list)
    emotions: list[str] = field(default_factory=list)
    frames: list[Received] = field(default_factory=list)
    start_t: float = 0.0
    stop_t: float = 0.0

    @property
    def text(self) -> str:
        return " ".join(self.sentences)

    @property
    def audio_s(self) -> float:
        return len(self.frames) * FRAME_MS / 1000


def is_tts(state: str) -> Callable[[Received], bool]:
    def matches(r: Received) -> bool:
        return r.kind == "json" and bool(r.msg) and r.msg.get("type") == "tts" and r.msg.get("state") == state

    return matches


class ReceivedLog:
    """The received items in arrival order, and waiting for what is expected among them. A client calls
    `_start_log()` before it receives, `_arrived(item)` for each item, and `_ended(code, reason)` once."""

    def _start_log(self) -> None:
        self.received: list[Received] = []
        self.closed = asyncio.Event()
        self.close_code: int | None = None
        self.close_reason = ""
        self._new = asyncio.Event()
        self._consumed = 0  # index into received for next_reply()

    def _arrived(self, item: Received) -> None:
        self.received.append(item)
        self._new.set()

    def _ended(self, code: int | None, reason: str) -> None:
        self.close_code, self.close_reason = code, reason
        self.closed.set()
        self._new.set()

    def json_messages(self, since: int = 0) -> list[dict]:
        return [r.msg for r in self.received[since:] if r.kind == "json" and r.msg is not None]

    async def wait_for(
        self, predicate: Callable[[Received], Any], timeout: float, since: int = 0
    ) -> Received:
        """The first received item (from index `since`) matching `predicate`."""
        deadline = time.monotonic() + timeout
        index = since
        while True:
            while index < len(self.received):
                item = self.received[index]
                index += 1
                if predicate(item):
                    return item
            if self.closed.is_set():
                raise ConnectionError(f"closed ({self.close_code} {self.close_reason!r}) while waiting; "
                                      f"got {self.summary()}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"nothing matching within {timeout} s; got {self.summary()}")
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), min(remaining, 0.5))

    async def wait_json(self, predicate: Callable[[dict], Any], timeout: float, since: int = 0) -> dict:
        def matches(r: Received) -> bool:
            return r.kind == "json" and isinstance(r.msg, dict) and bool(predicate(r.msg))

        item = await self.wait_for(matches, timeout, since)
        assert item.msg is not None
        return item.msg

    async def wait_closed(self, timeout: float) -> tuple[int | None, str]:
        await asyncio.wait_for(self.closed.wait(), timeout)
        return self.close_code, self.close_reason

    async def next_reply(self, timeout: float = 60.0) -> Reply:
        """The next complete reply (`tts start` … `tts stop`) after the previous one, with its `stt`."""
        start = await self.wait_for(is_tts("start"), timeout, self._consumed)
        start_index = self.received.index(start)
        stop = await self.wait_for(is_tts("stop"), timeout, start_index + 1)
        stop_index = self.received.index(stop)
        self._consumed = stop_index + 1
        stt = None
        for item in reversed(self.received[:start_index]):
            if item.kind == "json" and item.msg and item.msg.get("type") in ("stt", "tts"):
                stt = item.msg.get("text") if item.msg["type"] == "stt" else None
                break
        events = self.received[start_index : stop_index + 1]
        reply = Reply(stt=stt, events=events, start_t=start.t, stop_t=stop.t)
        for item in events:
            if item.kind == "audio":
                reply.frames.append(item)
            elif item.msg and item.msg.get("type") == "tts" and item.msg.get("state") == "sentence_start":
                reply.sentences.append(item.msg.get("text", ""))
            elif item.msg and item.msg.get("type") == "llm":
                reply.emotions.append(item.msg.get("emotion", ""))
        return reply

    def summary(self) -> str:
        """The last items received, one line (for failure messages)."""
        parts: list[str] = []
        audio_run = 0
        for item in self.received[-40:]:
            if item.kind == "audio":
                audio_run += 1
                continue
            if audio_run:
                parts.append(f"<{audio_run} audio>")
                audio_run = 0
            parts.append(json.dumps(item.msg, ensure_ascii=False)[:100] if item.msg else item.kind)
        if audio_run:
            parts.append(f"<{audio_run} audio>")
        return " | ".join(parts) or "nothing"
