"""The aiohttp application: every route on one port."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from shared_protocol.constants import CLOSE_GOING_AWAY
from wren.config import Config
from wren.session import SessionServices
from wren.store import open_device_registry, pairing_secret
from wren.transport.auth import Authenticator
from wren.transport.connection_limits import (
    HANDSHAKE_KEY,
    SLOTS_KEY,
    HandshakeDeadline,
    WebSocketSlots,
    keepalive_handler_args,
)
from wren.transport.console import add_console_routes
from wren.transport.console_devices import add_device_routes
from wren.transport.metrics import ServerMetrics, add_metrics_route
from wren.transport.ota import make_activate_handler, make_ota_handler, make_ota_info_handler
from wren.transport.websocket import STATUS_TEXT, make_websocket_handler

log = logging.getLogger(__name__)

SESSIONS_KEY = web.AppKey("wren_sessions", set)
METRICS_KEY = web.AppKey("wren_metrics", ServerMetrics)


def _both(path: str) -> list[str]:
    """`/xiaozhi/v1/` and `/xiaozhi/v1`: devices store whatever URL they were given."""
    stripped = path.rstrip("/") or "/"
    return [path] if stripped == path else [path, stripped]


def make_authenticator(config: Config) -> Authenticator:
    """Pair mode keeps its paired devices and (unless `[auth] secret` is set) its secret in the store: the
    data dir, or the Redis store that several instances share (wren.store)."""
    if config.auth.mode != "pair":
        return Authenticator(config.auth)
    return Authenticator(config.auth, open_device_registry(config), pairing_secret(config))


def build_web_app(services: SessionServices) -> web.Application:
    config = services.config
    auth = make_authenticator(config)
    sessions: set[Any] = set()
    app = web.Application(client_max_size=max(1024 * 1024, config.server.max_frame_bytes),
                          handler_args=keepalive_handler_args(config.limits))
    app[SESSIONS_KEY] = sessions
    # Connection bounds (wren.transport.connection_limits): the deadline is attached by WrenRunner, the
    # slots are taken by the WebSocket handler before it upgrades.
    app[HANDSHAKE_KEY] = HandshakeDeadline(config.limits.handshake_timeout_s)
    slots = app[SLOTS_KEY] = WebSocketSlots(config.limits.connections, config.limits.connections_per_ip)

    # The web console (wren.transport.console): a browser asking for `/` gets its page, anyone else this line.
    console = add_console_routes(app, config, sessions, auth) if config.console.enabled else None
    if console is not None:
        add_device_routes(app, console)  # pairing on the console (wren.transport.console_devices)

    async def status(request: web.Request) -> web.StreamResponse:
        if console is not None and console.wants_page(request):
            return await console.page(request)
        return web.Response(text=STATUS_TEXT)

    # /metrics (wren.transport.metrics): one registry per app; it is the sessions' timing sink.
    # The speak pool's waiting work is in the TTS scheduler: it hands the executor one job per thread.
    metrics = ServerMetrics(services.speech, {"listen": services.listen_executor,
                                              "speak": services.tts_scheduler or services.speak_executor})
    if services.timing is None:
        services.timing = metrics
    app[METRICS_KEY] = metrics
    add_metrics_route(app, metrics)
    ws_handler = make_websocket_handler(services, auth, sessions, metrics, slots)
    ota_handler = make_ota_handler(config, auth)
    app.router.add_get("/", status)
    for path in _both(config.server.websocket_path):
        app.router.add_get(path, ws_handler)
    for path in _both(config.server.ota_path):
        app.router.add_post(path, ota_handler)
        app.router.add_get(path, make_ota_info_handler(config))  # 200 with the WebSocket URL, not 405
    # `<ota>activate`: the official firmware appends "activate" to a URL ending in "/", else "/activate".
    app.router.add_post(config.server.ota_path.rstrip("/") + "/activate", make_activate_handler(auth))

    async def close_sessions(app: web.Application) -> None:
        # On shutdown, close every device socket (1001 going away) so no handler outlives the server.
        for session in list(sessions):
            await session.outbox.close(CLOSE_GOING_AWAY, "server shutting down")
        await asyncio.gather(*(s.close() for s in list(sessions)), return_exceptions=True)

    app.on_shutdown.append(close_sessions)
    if auth.registry is not None:
        registry = auth.registry

        async def close_registry(app: web.Application) -> None:
            registry.close()

        app.on_cleanup.append(close_registry)
    return app
