"""A local HTTP server speaking the OpenAI chat-completions streaming protocol, scripted per test.

A cloud LLM cannot exist here, so this is the one allowed fake: a real aiohttp server on 127.0.0.1
that answers `POST /v1/chat/completions` with server-sent events (content deltas, tool_calls deltas
split across chunks, `[DONE]`), exactly as OpenAI-compatible servers do. A script may also return an
async iterator of chunks (`endless_chunks`: a model that never stops), sent as they come.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

Script = Callable[[dict[str, Any]], Any]  # request body -> list of SSE chunks, or a web.Response


def text_chunks(*parts: str) -> list[dict[str, Any]]:
    first = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    chunks: list[dict[str, Any]] = [first]
    chunks += [{"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in parts]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return chunks


def tool_call_chunks(
    name: str, arguments: str, call_id: str = "call_1", pieces: int = 3
) -> list[dict[str, Any]]:
    """A tool call streamed like OpenAI does it: id and name first, the arguments in several pieces."""
    step = max(1, len(arguments) // pieces)
    parts = [arguments[i : i + step] for i in range(0, len(arguments), step)]
    chunks: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
        {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}]}}]}]
    for part in parts:
        delta = {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}
        chunks.append({"choices": [{"index": 0, "delta": delta}]})
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return chunks


async def endless_chunks(text: str = " and so on", delay: float = 0.0) -> AsyncIterator[dict[str, Any]]:
    """A reply that never ends: `text` again and again, one chunk every `delay` seconds, never `[DONE]`."""
    yield {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    while True:
        if delay:
            await asyncio.sleep(delay)
        else:
            await asyncio.sleep(0)  # let the connection's other work run between chunks
        yield {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}


class ScriptedLLM:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: Script = lambda body: text_chunks("Hello", " from", " the model.")
        self.chunk_delay = 0.0
        self.stall_after: int | None = None  # stop sending (but keep the connection) after N chunks
        self.closed_by_client = 0  # streams the client closed before their end (an endless one was cut)
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self.base_url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        self._stopping.set()  # release stalled handlers so cleanup does not wait for them
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        planned = self.script(body)
        if isinstance(planned, web.StreamResponse):
            return planned
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        if hasattr(planned, "__aiter__"):
            return await self._send_live(request, resp, planned)
        for n, chunk in enumerate(planned):
            if self.stall_after is not None and n >= self.stall_after:
                await self._stopping.wait()
                return resp
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _send_live(
        self, request: web.Request, resp: web.StreamResponse, chunks: AsyncIterator[dict[str, Any]]
    ) -> web.StreamResponse:
        """Chunks as the iterator makes them, until it ends, the client goes or the server stops."""
        try:
            async for chunk in chunks:
                transport = request.transport
                if self._stopping.is_set() or transport is None or transport.is_closing():
                    self.closed_by_client += not self._stopping.is_set()
                    return resp
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        except ConnectionResetError:
            self.closed_by_client += 1
            return resp
        except asyncio.CancelledError:
            self.closed_by_client += 1
            raise
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
