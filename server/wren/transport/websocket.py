"""`GET /xiaozhi/v1/`: the device WebSocket (or a plain status reply without an Upgrade header).

Order of business on a new socket: identity (headers or query) → admission (auth) → a DeviceSession;
then this task is the session's *reader*: it only moves frames into the session's inbox, in order.
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
from wren.transport.identity import identity_from_request
from wren.transport.metrics import ServerMetrics

log = logging.getLogger(__name__)

STATUS_TEXT = "Wren server is running"


def is_websocket_upgrade(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def make_websocket_handler(services: SessionServices, auth: Authenticator, sessions: set[Any],
                           metrics: ServerMetrics | None = None):
    max_frame = services.config.server.max_frame_bytes

    async def handle(request: web.Request) -> web.StreamResponse:
        if not is_websocket_upgrade(request):
            return web.Response(text=STATUS_TEXT)
        identity = identity_from_request(request)
        ws = web.WebSocketResponse(heartbeat=None, autoping=True, max_msg_size=max_frame)
        await ws.prepare(request)
        if not identity.device_id:
            log.warning("rejected connection from %s: no device id", identity.remote)
            await ws.close(
                code=CLOSE_MISSING_DEVICE_ID,
                message=close_reason("missing device id: send a Device-Id header or ?device-id="),
            )
            return ws
        verdict = auth.check(identity)
        if not verdict.ok:
            log.warning("rejected %s: %s", identity.describe(), verdict.reason)
            await ws.close(code=CLOSE_UNAUTHORIZED, message=close_reason(f"unauthorized: {verdict.reason}"))
            return ws
        log.info("connected %s (%s)", identity.describe(), verdict.reason)
        session = DeviceSession(identity, WebSocketConnection(ws), services)
        sessions.add(session)
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
            sessions.discard(session)
            await session.close()
            if metrics is not None:
                metrics.session_closed(session)  # its dropped-input counts join the totals
            if not ws.closed:
                await ws.close()
            log.info("disconnected %s (close code %s)", identity.describe(), ws.close_code)
        return ws

    return handle
