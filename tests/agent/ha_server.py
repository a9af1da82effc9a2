"""A local HTTP server speaking Home Assistant's documented conversation API, scripted by the text.

Home Assistant itself cannot run here, so this is the one allowed fake: a real aiohttp server on 127.0.0.1
answering `POST /api/conversation/process` as HA does (developers.home-assistant.io, "Conversation API"):
a long-lived token in `Authorization: Bearer …` or `401: Unauthorized`; `{"text", "language",
"conversation_id", "agent_id"}` in; `{"response": {"response_type", "language", "data", "speech": {"plain":
{"speech", "extra_data"}}}, "conversation_id", "continue_conversation"}` out. Conversation ids are made by
the server; an unknown one starts a new conversation with a new id (one way HA answers an expired id).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from aiohttp import web

TOKEN = "test-long-lived-token"


def _answer(kind: str, speech: str, language: str, conversation_id: str, *, code: str | None = None,
            continue_conversation: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {"code": code} if kind == "error" else {"targets": [], "success": [], "failed": []}
    return {
        "response": {
            "response_type": kind,
            "language": language,
            "data": data,
            "speech": {"plain": {"speech": speech, "extra_data": None}},
        },
        "conversation_id": conversation_id,
        "continue_conversation": continue_conversation,
    }


class FakeHomeAssistant:
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.requests: list[dict[str, Any]] = []  # {"headers": {...}, "body": {...}} per request
        self.conversations: dict[str, list[str]] = {}  # id -> the texts said in it, oldest first
        self.delay_s = 5.0  # how long "slow" takes
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/api/conversation/process", self._process)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        self._stopping.set()  # release slow handlers so cleanup does not wait for them
        if self._runner is not None:
            await self._runner.cleanup()

    def forget(self) -> None:
        """What HA does with idle conversations after a few minutes."""
        self.conversations.clear()

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests]

    async def _process(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        body = await request.json()
        self.requests.append({"headers": dict(request.headers), "body": body})
        if auth != f"Bearer {self.token}":
            return web.Response(status=401, text="401: Unauthorized")
        text = str(body.get("text") or "")
        language = str(body.get("language") or "en")
        conversation_id = body.get("conversation_id")
        if conversation_id not in self.conversations:
            conversation_id = uuid.uuid4().hex.upper()[:26]  # HA's ids are ULIDs: 26 characters
            self.conversations[conversation_id] = []
        earlier = list(self.conversations[conversation_id])
        self.conversations[conversation_id].append(text)
        if text == "slow":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.delay_s)
        if text == "broken":
            return web.Response(status=500, text="500 Internal Server Error\n\nServer got itself in trouble")
        if text == "not json":
            return web.Response(text="<html>a proxy's login page</html>", content_type="text/html")
        if text == "say nothing":
            return web.json_response(_answer("action_done", "", language, conversation_id))
        if text.startswith("turn on the "):
            return web.json_response(_answer("action_done", f"Turned on the {text[12:]}.", language,
                                             conversation_id))
        if text == "what did i just ask":
            said = f"You asked: {earlier[-1]}." if earlier else "You have not asked anything yet."
            return web.json_response(_answer("query_answer", said, language, conversation_id))
        if text == "set the temperature":
            return web.json_response(_answer("query_answer", "To what temperature?", language,
                                             conversation_id, continue_conversation=True))
        return web.json_response(_answer("error", "Sorry, I couldn't understand that", language,
                                         conversation_id, code="no_intent_match"))
