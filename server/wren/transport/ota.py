"""`POST /xiaozhi/ota/`: the device's boot-time check (reference §6).

Answers with the WebSocket to use (`url`, a freshly signed `token` in token mode, binary protocol
`version`), the server time (ms since epoch + timezone offset in minutes, which the device uses to set
its clock) and the firmware section echoing the device's own version (no upgrade offered). Both
`Device-Id` and `Client-Id` headers are required, as xiaozhi servers do; a missing one is a clear 400.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime

from aiohttp import web

from wren.agent.timeparse import local_timezone
from wren.config import Config
from wren.transport.auth import Authenticator

log = logging.getLogger(__name__)


def websocket_url(config: Config, request: web.Request) -> str:
    if config.server.public_ws_url:
        return config.server.public_ws_url
    scheme = "wss" if request.secure else "ws"
    return f"{scheme}://{request.host}{config.server.websocket_path}"


def _device_version(body: object) -> str:
    if isinstance(body, dict):
        application = body.get("application")
        if isinstance(application, dict) and isinstance(application.get("version"), str):
            return application["version"]
    return "0.0.0"


def timezone_offset_minutes(config: Config) -> int:
    """The local offset now: `[server] timezone` (daylight saving included) if set, else the fixed one."""
    if not config.server.timezone:
        return config.server.timezone_offset_minutes
    offset = datetime.now(local_timezone(config.server.timezone)).utcoffset()
    return int(offset.total_seconds() // 60) if offset is not None else 0


def make_ota_handler(config: Config, auth: Authenticator):
    async def ota(request: web.Request) -> web.Response:
        device_id = request.headers.get("Device-Id", "").strip()
        client_id = request.headers.get("Client-Id", "").strip()
        missing = [name for name, value in (("Device-Id", device_id), ("Client-Id", client_id)) if not value]
        if missing:
            log.info("OTA request from %s without %s", request.remote, " and ".join(missing))
            return web.json_response(
                {"error": f"missing {' and '.join(missing)} header(s)"}, status=400
            )
        raw = await request.read()
        body: object = {}
        if raw.strip():
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                return web.json_response({"error": "body must be the device's system-info JSON"}, status=400)
        log.info("OTA check from device %s (firmware %s)", device_id, _device_version(body))
        return web.json_response(
            {
                "server_time": {
                    "timestamp": int(time.time() * 1000),
                    "timezone_offset": timezone_offset_minutes(config),
                },
                "firmware": {"version": _device_version(body), "url": ""},
                "websocket": {
                    "url": websocket_url(config, request),
                    "token": auth.sign(client_id, device_id),
                    "version": config.server.protocol_version,
                },
            }
        )

    return ota
