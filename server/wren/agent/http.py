"""Text turns over HTTP: `POST /api/chat` with `{"session": "...", "message": "..."}` -> `{"reply": "..."}`.

The caller needs the server's API key, sent as `Authorization: Bearer <key>` or `X-API-Key: <key>`; without
it, or with another, the answer is a 401 with a JSON `error` (checked before the body is read). The key is
made at the first start into `<data_dir>/api_key` (0600) and kept, so it survives restarts.

A key has sessions of its own: the session name the client gives (default `default`) is stored under
`api:<key id>:<name>` (the key id: the first 12 hex digits of the key's SHA-256), so a client cannot name
its way into a device's history (`xiaozhi:<device-id>`) or `wren chat`'s; a new key starts from empty
sessions. `[api] device_sessions = true` lets a session named `xiaozhi:<device-id>` continue that device's
conversation, as before. Bad input gets a 400 with a JSON `error`, an engine failure a 500; neither
affects other sessions.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from wren.agent.loop import AgentLoop

log = logging.getLogger(__name__)

API_KEY_FILE = "api_key"
DEFAULT_SESSION = "default"
DEVICE_SESSION_PREFIX = "xiaozhi:"  # the device sessions' keys (wren.session.device_session)
MAX_MESSAGE_CHARS = 4000
MAX_KEY_CHARS = 256  # a key is 43 characters; anything far longer is refused unread
CHAT_KEY = web.AppKey("wren_chat", object)


def new_api_key() -> str:
    return secrets.token_urlsafe(32)


def load_or_create_api_key(data_dir: Path) -> tuple[str, bool]:
    """The API key in `<data_dir>/api_key`, and whether it was made just now (`wren serve` prints it then).

    A new key is written to a private temporary file (0600 from its creation, whatever the umask) and
    linked into place: a second process starting at the same moment either wins the link or reads the
    winner's key, and nobody ever reads a half-written file."""
    path = Path(data_dir) / API_KEY_FILE
    with contextlib.suppress(FileNotFoundError):
        key = path.read_text(encoding="ascii").strip()
        if key:
            return key, False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = new_api_key()
    temporary = path.with_name(f".{API_KEY_FILE}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(key + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:  # another start won, or an empty file was left: keep a non-empty one
            existing = path.read_text(encoding="ascii").strip()
            if existing:
                return existing, False
            os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return key, True


def key_id(key: str) -> str:
    """What names a key's sessions: not the key itself (the sessions database is not a key store)."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def presented_key(request: web.Request) -> str:
    """The key a request sends: `X-API-Key`, else `Authorization: Bearer`; empty when neither."""
    direct = request.headers.get("X-API-Key", "").strip()
    if direct:
        return direct
    scheme, _, rest = request.headers.get("Authorization", "").strip().partition(" ")
    return rest.strip() if scheme.lower() == "bearer" else ""


def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers or None)


class ChatApi:
    def __init__(self, agent: AgentLoop, api_key: str, device_sessions: bool = False) -> None:
        if not api_key:
            raise ValueError("POST /api/chat needs an API key")
        self.agent = agent
        self._key = api_key.encode()
        self.key_id = key_id(api_key)
        self.device_sessions = device_sessions

    def refusal(self, request: web.Request) -> web.Response | None:
        given = presented_key(request)
        challenge = {"WWW-Authenticate": 'Bearer realm="wren-api"'}
        if not given:
            return _error(401, "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>' "
                          "(wren serve printed the key at its first start; it is kept in the data dir's "
                          "api_key file)", **challenge)
        if len(given) > MAX_KEY_CHARS or not hmac.compare_digest(given.encode(), self._key):
            log.info("chat: wrong API key from %s", request.remote)
            return _error(401, "wrong API key", **challenge)
        return None

    def route(self, session: str) -> tuple[str, str, str]:
        """(session key, channel, chat id) of a session name: the key's own unless it may reach devices."""
        if self.device_sessions and session.startswith(DEVICE_SESSION_PREFIX):
            channel, _, chat_id = session.partition(":")
            return session, channel, chat_id
        return f"api:{self.key_id}:{session}", "api", f"{self.key_id}:{session}"

    async def handle(self, request: web.Request) -> web.Response:
        refused = self.refusal(request)
        if refused is not None:
            return refused
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "body must be JSON")
        if not isinstance(body, dict):
            return _error(400, "body must be a JSON object")
        message = body.get("message")
        session = body.get("session", DEFAULT_SESSION)
        if not isinstance(message, str) or not message.strip():
            return _error(400, "'message' must be a non-empty string")
        if len(message) > MAX_MESSAGE_CHARS:
            return _error(400, f"'message' is longer than {MAX_MESSAGE_CHARS} characters")
        if not isinstance(session, str) or not session.strip() or len(session) > 200:
            return _error(400, "'session' must be a non-empty string of at most 200 characters")
        session_key, channel, chat_id = self.route(session)
        try:
            reply = await self.agent.process_direct(message.strip(), session_key=session_key, channel=channel,
                                                    chat_id=chat_id)
        except Exception:
            log.exception("chat turn failed for session %r", session_key)
            return _error(500, "the assistant failed; try again")
        return web.json_response({"session": session, "reply": reply.content})


def add_routes(app: web.Application, agent: AgentLoop, api_key: str,
               device_sessions: bool = False) -> ChatApi:
    """Add `POST /api/chat` to an aiohttp application, answering through `agent` for holders of `api_key`."""
    chat = ChatApi(agent, api_key, device_sessions)
    app[CHAT_KEY] = chat
    app.router.add_post("/api/chat", chat.handle)
    return chat
