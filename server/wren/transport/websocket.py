"""`GET /xiaozhi/v1/`: the device WebSocket (or a plain status reply without an Upgrade header).

Order of business on a new socket: a slot (global and per-address caps, else HTTP 503/429 before the
upgrade; wren.transport.connection_limits) → identity (headers or query) → ids checked (4400) → admission
(auth, 4401) → a DeviceSession, which takes over from any live session of the same device id
(wren.transport.live: the old one is closed and gone before the new one starts); then this task is the
session's *reader*: it only moves frames into the session's inbox, in order.
Library-level pings are off (`heartbeat=None`): some ESP32 builds never pong and would be dropped
after ~40 s (reference §10 row 2); aiohttp still answers the client's pings (`autoping`).
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import WSMsgType, web

from shared_protocol.constants import CLOSE_MISSING_DEVICE_ID, CLOSE_UNAUTHORIZED
from wren.session import DeviceSession, SessionServices
from wren.transport.auth import Authenticator
from wren.transport.connection import WebSocketConnection, close_reason
from wren.transport.connection_limits import WebSocketSlots
from wren.transport.identity import DeviceIdentity, id_problem, identity_from_request, shown_id
from wren.transport.live import LiveSessions
from wren.transport.metrics import ServerMetrics

log = logging.getLogger(__name__)

STATUS_TEXT = "Wren server is running"


def is_websocket_upgrade(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def identity_refusal(identity: DeviceIdentity) -> str | None:
    """Why these ids are refused (close 4400), or None; logged with repr(), never raw."""
    if not identity.device_id:
        return "missing device id: send a Device-Id header or ?device-id="
    problem = id_problem("device id", identity.device_id)
    if problem is None and identity.client_id:  # an empty client id is allowed (some clients send none)
        problem = id_problem("client id", identity.client_id)
    return f"invalid {problem}" if problem else None


def make_websocket_handler(services: SessionServices, auth: Authenticator, sessions: set[Any],
                           metrics: ServerMetrics | None = None, slots: WebSocketSlots | None = None):
    max_frame = services.config.server.max_frame_bytes
    live = LiveSessions(sessions)
    slots = slots or WebSocketSlots(0, 0)

    async def handle(request: web.Request) -> web.StreamResponse:
        if not is_websocket_upgrade(request):
            return web.Response(text=STATUS_TEXT)
        remote = request.remote or "?"  # the socket's peer: a header could name anyone
        refused = slots.refusal(remote)
        if refused is not None:
            return refused  # plain HTTP, never upgraded: no session, no reader
        with slots.held(remote):  # freed whichever way the socket ends, refusals below included
            return await serve(request)

    async def serve(request: web.Request) -> web.StreamResponse:
        identity = identity_from_request(request)
        # No permessage-deflate, even when the client offers it (Python clients do): Opus does not
        # compress, and inflating every 60 ms audio frame (and deflating every reply frame) cost the
        # event loop more than anything else at a connection storm, plus two zlib windows per socket.
        # Stock devices never ask for it.
        ws = web.WebSocketResponse(heartbeat=None, autoping=True, max_msg_size=max_frame, compress=False)
        await ws.prepare(request)
        refusal = identity_refusal(identity)
        if refusal is not None:
            log.info("rejected connection from %s (device %s, client %s): %s", identity.remote,
                     shown_id(identity.device_id), shown_id(identity.client_id), refusal)
            await ws.close(code=CLOSE_MISSING_DEVICE_ID, message=close_reason(refusal))
            return ws
        verdict = auth.check(identity)
        if not verdict.ok:
            log.info("rejected %s: %s", identity.describe(), verdict.reason)
            await ws.close(code=CLOSE_UNAUTHORIZED, message=close_reason(f"unauthorized: {verdict.reason}"))
            return ws
        log.info("connected %s (%s)", identity.describe(), verdict.reason)
        session = DeviceSession(identity, WebSocketConnection(ws), services)
        await live.admit(session)  # any older session of this device id is closed and gone first
        if metrics is not None:
            metrics.session_opened(session)
        session.start()
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    await session.receive_text(msg.data)
                elif msg.type == WSMsgType.BINARY:
                    await session.receive_binary(msg.data)
                elif msg.type == WSMsgType.ERROR:
                    log.warning("%s: socket error: %s", session.name, ws.exception())
        except Exception:
            log.exception("%s: reader failed", session.name)
        finally:
            live.discard(session)
            await session.close()
            if metrics is not None:
                metrics.session_closed(session)  # its dropped-input counts join the totals
            if not ws.closed:
                await ws.close()
            log.info("disconnected %s (close code %s)", identity.describe(), ws.close_code)
        return ws

    return handle
