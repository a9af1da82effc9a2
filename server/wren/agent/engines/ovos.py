"""The OpenVoiceOS engine: a messagebus chat agent written natively on asyncio.

Each Wren session key owns one OVOS session (a unique `session_id`, never "default"; the full session
dict OVOS sends back is persisted as this engine's state, so skills keep their state across turns and
restarts). A turn emits `recognizer_loop:utterance` with that session, then collects the `speak`
messages whose `context.session.session_id` matches, streaming each sentence as it arrives, and ends
on `ovos.utterance.handled`. None of the plugin's hang risks: the wait is a rolling idle timeout
(`ovos_timeout_s` since the last message for this session) under an overall deadline
(`ovos_max_turn_s`), so a skill that never says "handled" or never stops talking still ends the turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import aiohttp

from wren.agent.engines.base import TurnContext
from wren.agent.events import Emotion, TextChunk, TurnEvent

if TYPE_CHECKING:
    from wren.config import AgentConfig

log = logging.getLogger(__name__)

SPEAK_TYPES = ("speak", "ovos.utterance.speak")  # legacy name and the migrated namespace
HANDLED = "ovos.utterance.handled"
SOURCE = "wren"
APOLOGY_DOWN = "Sorry, I can't reach OpenVoiceOS right now."
APOLOGY_SILENT = "Sorry, OpenVoiceOS did not answer."
# Bus messages buffered per active turn; full -> the rest of that turn's messages are dropped (one
# warning), because the one reader serves every session and must never wait for a turn that is behind;
# the turn says what it has (a clean prefix, no gaps) and its idle timeout or deadline ends it.
LISTENER_QUEUE_SIZE = 256


class OvosEngine:
    name = "ovos"

    def __init__(
        self, url: str, *, timeout_s: float = 10.0, max_turn_s: float = 30.0, lang: str = "en-US"
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.max_turn_s = max_turn_s
        self.lang = lang
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._connect_lock = asyncio.Lock()
        self._listeners: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self._overflowed: set[str] = set()  # sessions whose turn overflowed: their messages are dropped

    @classmethod
    def from_config(cls, agent: AgentConfig) -> OvosEngine:
        return cls(agent.ovos_url, timeout_s=agent.ovos_timeout_s, max_turn_s=agent.ovos_max_turn_s,
                   lang=agent.ovos_lang)

    async def start(self) -> None:
        # Connect lazily on the first turn: OVOS may start after Wren, and a missing bus is not fatal.
        if self._http is None:
            self._http = aiohttp.ClientSession()

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(BaseException):
                await self._reader
            self._reader = None
        if self._ws is not None:
            await self._ws.close()
            self._ws = None
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _connection(self) -> aiohttp.ClientWebSocketResponse:
        async with self._connect_lock:
            if self._ws is not None and not self._ws.closed:
                return self._ws
            await self.start()
            assert self._http is not None
            self._ws = await self._http.ws_connect(
                self.url, timeout=aiohttp.ClientWSTimeout(ws_close=self.timeout_s), heartbeat=30.0,
                max_msg_size=0,
            )
            self._reader = asyncio.get_running_loop().create_task(self._read(self._ws), name="ovos-bus")
            log.info("connected to the OVOS messagebus at %s", self.url)
            return self._ws

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Route every bus message to the turn waiting on its session_id; ignore the rest."""
        async for frame in ws:
            if frame.type != aiohttp.WSMsgType.TEXT:
                continue
            try:
                message = json.loads(frame.data)
                session = (message.get("context") or {}).get("session") or {}
                session_id = session.get("session_id")
            except (ValueError, AttributeError):
                continue
            queue = self._listeners.get(session_id) if isinstance(session_id, str) else None
            if queue is not None and session_id not in self._overflowed:
                try:
                    queue.put_nowait(message)
                except asyncio.QueueFull:
                    self._overflowed.add(session_id)
                    log.warning("OVOS turn %s is %d messages behind; dropping the rest of its messages",
                                session_id, LISTENER_QUEUE_SIZE)
        log.info("OVOS messagebus connection closed")

    @staticmethod
    def _session_for(ctx: TurnContext) -> dict[str, Any]:
        session = ctx.state.get("ovos_session")
        if not isinstance(session, dict) or session.get("session_id") in (None, "", "default"):
            # First turn: only the id, so OVOS core fills in its own defaults (and echoes them back).
            session = {"session_id": f"wren-{uuid.uuid4().hex}"}
        return session

    async def respond(self, ctx: TurnContext) -> AsyncIterator[TurnEvent]:
        session = self._session_for(ctx)
        session_id = session["session_id"]
        ctx.state["ovos_session"] = session
        # Bounded (LISTENER_QUEUE_SIZE); full -> the reader drops the rest of this turn's messages.
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(LISTENER_QUEUE_SIZE)
        self._listeners[session_id] = queue  # registered before emitting: no reply can be missed
        spoke = False
        try:
            try:
                ws = await asyncio.wait_for(self._connection(), self.timeout_s)
                await ws.send_str(json.dumps({
                    "type": "recognizer_loop:utterance",
                    "data": {"utterances": [ctx.text], "lang": session.get("lang") or self.lang},
                    "context": {"session": session, "source": SOURCE},
                }))
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.warning("OVOS messagebus %s unreachable: %s", self.url, exc)
                yield Emotion("sad")
                yield TextChunk(APOLOGY_DOWN)
                return
            deadline = time.monotonic() + self.max_turn_s
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.info("OVOS turn for %s hit the %.0fs deadline", session_id, self.max_turn_s)
                    break
                try:
                    message = await asyncio.wait_for(queue.get(), min(self.timeout_s, remaining))
                except TimeoutError:
                    log.info("OVOS turn for %s idle for %.1fs; ending it", session_id, self.timeout_s)
                    break
                returned = (message.get("context") or {}).get("session")
                if isinstance(returned, dict) and returned.get("session_id") == session_id:
                    ctx.state["ovos_session"] = returned  # skills' state flows back here
                kind = message.get("type")
                if kind in SPEAK_TYPES:
                    utterance = str((message.get("data") or {}).get("utterance") or "").strip()
                    if utterance:
                        if not spoke:
                            yield Emotion("happy")
                        yield TextChunk((" " if spoke else "") + utterance)
                        spoke = True
                elif kind == HANDLED:
                    break
            if not spoke:
                yield Emotion("confused")
                yield TextChunk(APOLOGY_SILENT)
        finally:
            if self._listeners.get(session_id) is queue:
                del self._listeners[session_id]
                self._overflowed.discard(session_id)
