"""`POST /xiaozhi/ota/`: the device's boot-time check (reference §6); `GET` says what is there.

Answers with the WebSocket to use (`url`, a `token`, binary protocol `version`), the server time (ms
since epoch + timezone offset in minutes, which the device uses to set its clock) and the firmware section
echoing the device's own version (no upgrade offered). Both `Device-Id` and `Client-Id` headers are
required, as xiaozhi servers do; a missing or malformed one is a clear 400.

A `GET` (someone checking the OTA URL they typed into a device, as xinnan answers it) gets 200 with the
WebSocket URL devices would be handed: JSON by default, a small HTML page for a browser, plain text when
that is what the Accept header prefers.

Tokens (auth mode `token`): a fresh one only for a device that already holds a valid token for these ids
(`Authorization: Bearer …` on the OTA request: renewal) or is listed in `auth.allowed_devices`. Anyone
else gets an empty token (and the rest of the answer), so knowing a Device-Id is not enough to get in;
such a device needs a token made with `wren token`. Pairing by a code is not there yet.
"""

from __future__ import annotations

import html
import json
import logging
import time
from datetime import datetime

from aiohttp import web

from wren.agent.timeparse import local_timezone
from wren.config import Config, package_version
from wren.transport.auth import Authenticator
from wren.transport.identity import DeviceIdentity, id_problem, shown_id

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


def token_for(auth: Authenticator, identity: DeviceIdentity) -> tuple[str, str]:
    """(token, why): what the OTA answer hands this device; an empty token unless it may have one."""
    if auth.config.mode != "token":
        return "", "open mode"
    if auth.is_allowed(identity.device_id):
        return auth.sign(identity.client_id, identity.device_id), "allowed device"
    if not identity.authorization:
        return "", "no token: not in auth.allowed_devices and no valid token presented"
    verdict = auth.check_token(identity)
    if verdict.ok:
        return auth.sign(identity.client_id, identity.device_id), "renewed a valid token"
    return "", f"no token: {verdict.reason}"


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
        problem = id_problem("Device-Id", device_id) or id_problem("Client-Id", client_id)
        if problem is not None:
            log.info("OTA request from %s refused (device %s, client %s): %s", request.remote,
                     shown_id(device_id), shown_id(client_id), problem)
            return web.json_response({"error": f"invalid {problem}"}, status=400)
        raw = await request.read()
        body: object = {}
        if raw.strip():
            try:
                body = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                return web.json_response({"error": "body must be the device's system-info JSON"}, status=400)
        identity = DeviceIdentity(device_id, client_id, request.headers.get("Authorization", "").strip(),
                                  None, request.remote or "?")
        token, why = token_for(auth, identity)
        log.info("OTA check from device %r (firmware %r): %s", device_id, _device_version(body)[:64], why)
        return web.json_response(
            {
                "server_time": {
                    "timestamp": int(time.time() * 1000),
                    "timezone_offset": timezone_offset_minutes(config),
                },
                "firmware": {"version": _device_version(body), "url": ""},
                "websocket": {
                    "url": websocket_url(config, request),
                    "token": token,
                    "version": config.server.protocol_version,
                },
            }
        )

    return ota


INFO_TYPES = ("application/json", "text/html", "text/plain")  # what GET answers in; JSON by default


def preferred_type(accept: str, offered: tuple[str, ...]) -> str:
    """The offered media type the Accept header ranks highest (q, then order); `offered[0]` by default."""
    best, best_q = offered[0], 0.0
    for rank in accept.split(","):
        media, *params = (part.strip().lower() for part in rank.split(";"))
        q = 1.0
        for param in params:
            if param.startswith("q="):
                try:
                    q = float(param[2:])
                except ValueError:
                    q = 0.0
        for kind in offered:
            if media in (kind, f"{kind.split('/')[0]}/*") and q > best_q:
                best, best_q = kind, q
    return best


def make_ota_info_handler(config: Config):
    async def info(request: web.Request) -> web.Response:
        url = websocket_url(config, request)
        server = f"wren {package_version()}"
        kind = preferred_type(request.headers.get("Accept", ""), INFO_TYPES)
        if kind == "text/html":
            page = (f"<!doctype html><meta charset=utf-8><title>Wren OTA</title><h1>Wren OTA endpoint</h1>"
                    f"<p>{html.escape(server)} is running. Devices POST their boot check here and are sent "
                    f"to <code>{html.escape(url)}</code>.</p><p><a href=\"/\">Console</a></p>")
            return web.Response(text=page, content_type="text/html")
        if kind == "text/plain":
            return web.Response(text=f"{server}: OTA endpoint is running; devices POST here and are sent to "
                                     f"the WebSocket {url}\n")
        return web.json_response({"websocket": {"url": url}, "server": server, "hint": "devices POST here"})

    return info
