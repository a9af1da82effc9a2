"""`POST /xiaozhi/ota/`: the device's boot-time check (reference §6); `GET` says what is there.

Answers with the WebSocket to use (`url`, a `token`, binary protocol `version`), the server time (ms
since epoch + timezone offset in minutes, which the device uses to set its clock) and the firmware section
echoing the device's own version (no upgrade offered). Both `Device-Id` and `Client-Id` headers are
required, as xiaozhi servers do; a missing or malformed one is a clear 400.

A `GET` (someone checking the OTA URL they typed into a device, as xinnan answers it) gets 200 with the
WebSocket URL devices would be handed: JSON by default, a small HTML page for a browser, plain text when
that is what the Accept header prefers.

Tokens, auth mode `pair` (the default): a paired device id + client id pair gets its token (the same one
until half its lifetime has passed, then a renewed one); a device in `auth.allowed_devices` gets one too.
Anyone else gets the official firmware's activation answer (reference §6.3): a 6-digit code, which the
device shows and speaks, and a challenge, so it polls `POST <ota>activate` (202 while the request waits,
200 once the owner ran `wren devices approve CODE`) and then checks OTA again for its token.

Auth mode `token`: a fresh one only for a device that already holds a valid token for these ids
(`Authorization: Bearer …` on the OTA request: renewal) or is listed in `auth.allowed_devices`. Anyone
else gets an empty token (and the rest of the answer), so knowing a Device-Id is not enough to get in;
such a device needs a token made with `wren token`.
"""

from __future__ import annotations

import html
import json
import logging
import secrets
import time
from datetime import datetime

from aiohttp import web

from wren.agent.timeparse import local_timezone
from wren.config import Config, package_version
from wren.store.records import PairedDevice, token_digest
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


def paired_token(auth: Authenticator, device: PairedDevice, now: float | None = None) -> str:
    """The paired device's token, signed again from its pairing; renewed (and recorded) once half its
    lifetime is gone, or when the secret changed since."""
    now = time.time() if now is None else now
    token = auth.sign(device.client_id, device.device_id, device.signed_at)
    stale = now - device.signed_at > auth.config.token_ttl_s / 2
    if (stale or token_digest(token) != device.token_sha256) and auth.registry is not None:
        token = auth.sign(device.client_id, device.device_id, int(now))
        auth.registry.resign(device.device_id, int(now), token)
    return token


def token_for(auth: Authenticator, identity: DeviceIdentity) -> tuple[str, str]:
    """(token, why): what the OTA answer hands this device; an empty token unless it may have one."""
    if not auth.signs_tokens:
        return "", "open mode"
    if auth.is_allowed(identity.device_id):
        return auth.sign(identity.client_id, identity.device_id), "allowed device"
    if auth.registry is not None:
        paired = auth.registry.paired(identity.device_id)
        if paired is not None and paired.client_id == identity.client_id:
            return paired_token(auth, paired), "paired device"
        return "", "not paired"
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
        answer: dict[str, object] = {
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
        if auth.registry is not None and why == "not paired":
            pairing = auth.registry.request(device_id, client_id, request.remote or "?")
            log.warning("device %r (client %r, %s) asks to pair: code %s; approve it with "
                        "`wren devices approve %s`", device_id, client_id, request.remote, pairing.code,
                        pairing.code)
            answer["activation"] = {
                "code": pairing.code,
                "message": f"{console_url(request)}\n{pairing.code}",
                "challenge": secrets.token_hex(16),  # makes the official firmware poll `activate`
                "timeout_ms": 30000,
            }
        return web.json_response(answer)

    return ota


def console_url(request: web.Request) -> str:
    return f"{'https' if request.secure else 'http'}://{request.host}/"


def make_activate_handler(auth: Authenticator):
    """`POST <ota>activate`: 200 once paired, 202 while the pairing request waits, 409 without one (the
    official firmware retries 202 after 3 s, anything else after 10 s, then checks OTA again)."""

    async def activate(request: web.Request) -> web.Response:
        device_id = request.headers.get("Device-Id", "").strip()
        client_id = request.headers.get("Client-Id", "").strip()
        if not device_id or not client_id or id_problem("Device-Id", device_id) or id_problem("Client-Id",
                                                                                               client_id):
            return web.json_response({"error": "Device-Id and Client-Id headers required"}, status=400)
        await request.read()  # the body (challenge HMAC) is not needed: the owner's approval is the proof
        registry = auth.registry
        if registry is None:
            return web.json_response({"success": True})  # nothing to pair in this auth mode
        paired = registry.paired(device_id)
        if paired is not None and paired.client_id == client_id:
            return web.json_response({"success": True})
        if registry.is_pending(device_id, client_id):
            return web.json_response({"pending": True, "hint": "approve the code: wren devices approve CODE"},
                                     status=202)
        return web.json_response({"error": "no pairing request: check OTA again"}, status=409)

    return activate


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
