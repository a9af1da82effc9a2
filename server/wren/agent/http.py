"""Text turns over HTTP: `POST /api/chat` with `{"session": "...", "message": "..."}` -> `{"reply": "..."}`.

The session key is used as given (default `api:default`), so a client may continue any conversation,
including a device's (`xiaozhi:<device-id>`); different keys never share history. Bad input gets a
400 with a JSON `error`, an engine failure a 500; neither affects other sessions.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from wren.agent.loop import AgentLoop

log = logging.getLogger(__name__)

DEFAULT_SESSION = "api:default"
MAX_MESSAGE_CHARS = 4000
AGENT_KEY = web.AppKey("wren_agent", object)


def _bad(message: str) -> web.Response:
    return web.json_response({"error": message}, status=400)


async def _chat(request: web.Request) -> web.Response:
    agent: AgentLoop = request.app[AGENT_KEY]  # type: ignore[assignment]
    try:
        body = await request.json()
    except ValueError:
        return _bad("body must be JSON")
    if not isinstance(body, dict):
        return _bad("body must be a JSON object")
    message = body.get("message")
    session = body.get("session", DEFAULT_SESSION)
    if not isinstance(message, str) or not message.strip():
        return _bad("'message' must be a non-empty string")
    if len(message) > MAX_MESSAGE_CHARS:
        return _bad(f"'message' is longer than {MAX_MESSAGE_CHARS} characters")
    if not isinstance(session, str) or not session.strip() or len(session) > 200:
        return _bad("'session' must be a non-empty string of at most 200 characters")
    channel, _, chat_id = session.partition(":")
    try:
        reply = await agent.process_direct(message.strip(), session_key=session, channel=channel or "api",
                                           chat_id=chat_id or "default")
    except Exception:
        log.exception("chat turn failed for session %s", session)
        return web.json_response({"error": "the assistant failed; try again"}, status=500)
    return web.json_response({"session": session, "reply": reply.content})


def add_routes(app: web.Application, agent: AgentLoop) -> None:
    """Add `POST /api/chat` to an aiohttp application, answering through `agent`."""
    app[AGENT_KEY] = agent
    app.router.add_post("/api/chat", _chat)
