"""Pairing on the web console (docs/server.md "Web console"): the devices waiting with a code, the paired
ones, and Approve / Revoke, over the same DeviceRegistry as `wren devices` (auth mode `pair`).

Routes:
- `GET /api/devices`: `{"waiting": [...], "paired": [...]}` (the pairing view below);
- `POST /api/devices/approve` `{"code": "123456"}`: pairs the device waiting with that code (its next OTA
  check gets its token), answers `{"paired": {...}, "pairing": <view>}`;
- `POST /api/devices/revoke` `{"device_id": "…"}`: ends the pairing, and closes the device's live
  connection (4401 `unauthorized: device revoked`), answers `{"revoked", "closed", "pairing"}`.
The console's status has the view as `pairing` (null outside pair mode), and the live feed sends a
`pairing` event when it changes (looked at once a second while a page is open; the `wren devices` command
writes the same file from another process, so it is read, not notified).

Who may: the console's rule for all three (the local network, plus `[console] key` when set). Approving
and revoking decide who may connect, so they also need
- the server's own machine or the console key: without a key, anyone on the LAN could approve their own
  code, even one that claims a paired device's id (an approval replaces that pairing), and pair mode would
  admit whoever asks. "Its own machine" is a loopback peer *and* a loopback Host (`localhost`,
  `127.0.0.1`, `[::1]`): a page elsewhere whose name was rebound to 127.0.0.1 (DNS rebinding) is
  same-origin with itself, but its Host is its own name;
- a same-origin JSON POST: `Content-Type: application/json` (an HTML form cannot send it, and a cross-site
  script sending it needs a CORS preflight, which is never granted), `Origin`, when sent, naming this
  host, and `Sec-Fetch-Site`, when sent, `same-origin`: a page elsewhere cannot make the owner's browser
  approve anything.
Outside pair mode (the Authenticator has no registry) every route answers 409, saying why.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import sqlite3
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from shared_protocol.constants import CLOSE_UNAUTHORIZED
from wren.store.records import CODE_TTL_S
from wren.transport.console import SECURITY_HEADERS, Console
from wren.transport.identity import MAX_ID_CHARS, shown_id

log = logging.getLogger(__name__)

LOOK_S = 1.0  # how often the registry is read for the feed while a page is open
REVOKED_REASON = "unauthorized: device revoked"
_CODE = re.compile(r"[0-9]{6}")


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str


def is_loopback(remote: str | None) -> bool:
    try:
        address = ipaddress.ip_address((remote or "").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def is_loopback_host(host: str) -> bool:
    """A Host header naming this machine by its loopback name or address (`localhost:8000`, `[::1]:8000`)."""
    try:
        name = urlsplit(f"//{host}").hostname or ""
    except ValueError:
        return False
    return name == "localhost" or is_loopback(name)


def change_refusal(remote: str | None, headers: Any, host: str, keyed: bool) -> Refusal | None:
    """Why a request may not approve or revoke (after the console's own access rule), or None."""
    if not keyed and not (is_loopback(remote) and is_loopback_host(host)):
        return Refusal(403, "approving and revoking devices needs the console key ([console] key), or the "
                            "console opened on the server's own machine as http://localhost:<port>/ (or "
                            "`wren devices` there)")
    site = headers.get("Sec-Fetch-Site")
    if site is not None and site != "same-origin":
        return Refusal(403, f"cross-site request refused (Sec-Fetch-Site: {site})")
    origin = headers.get("Origin")
    if origin is not None:
        netloc = urlsplit(origin).netloc if origin.strip().lower() != "null" else ""
        if not netloc or netloc.lower() != host.lower():
            return Refusal(403, f"cross-origin request refused (Origin {origin[:100]!r} is not this server)")
    kind = headers.get("Content-Type", "").partition(";")[0].strip().lower()
    if kind != "application/json":
        return Refusal(415, "send a JSON body (Content-Type: application/json)")
    return None


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=SECURITY_HEADERS)


class DeviceApprovals:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.registry = console.auth.registry  # None outside pair mode
        self._last: dict | None = None
        self._next_look = 0.0

    # ---- the pairing view --------------------------------------------------------------------------

    def view(self) -> dict | None:
        """Who waits (with their code) and who is paired; None outside pair mode."""
        if self.registry is None:
            return None
        paired = self.registry.paired_devices()
        clients = {d.device_id: d.client_id for d in paired}
        live = {s.identity.device_id for s in self.console.sessions}
        return {
            "waiting": [{"code": r.code, "device_id": r.device_id, "client_id": r.client_id,
                         "remote": r.remote, "requested_at": round(r.created_at, 3),
                         "expires_at": round(r.created_at + CODE_TTL_S, 3),
                         # approving replaces this device id's pairing: the page says so
                         "replaces_client_id": clients.get(r.device_id)}
                        for r in self.registry.pending()],
            "paired": [{"device_id": d.device_id, "client_id": d.client_id,
                        "approved_at": round(d.approved_at, 3), "connected": d.device_id in live}
                       for d in paired],
        }

    def status_view(self) -> dict | None:
        """The view for the console's status: a registry that cannot be read never fails the status."""
        try:
            return self.view()
        except sqlite3.Error as exc:
            log.warning("console: pairing registry unreadable: %s", exc)
            return {"waiting": [], "paired": [], "error": "the pairing registry could not be read"}

    def poll(self, force: bool = False) -> None:
        """A `pairing` event to the feeds when the view changed (throttled; only while a page listens)."""
        if self.registry is None or not (force or self.console.has_feeds):
            return
        now = time.monotonic()
        if not force and now < self._next_look:
            return
        self._next_look = now + LOOK_S
        current = self.status_view()
        if current != self._last:
            self._last = current
            self.console.broadcast("pairing", current)

    # ---- handlers ------------------------------------------------------------------------------------

    def _refused(self, request: web.Request, change: bool) -> web.Response | None:
        verdict = self.console.access(request)
        if not verdict.ok:
            return self.console.refusal(verdict)
        if change:
            refusal = change_refusal(request.remote, request.headers, request.host,
                                     bool(self.console.config.console.key))
            if refusal is not None:
                log.info("console: %s refused from %s (%s)", request.path, request.remote, refusal.reason)
                return _error(refusal.status, refusal.reason)
        if self.registry is None:
            return _error(409, f"pairing is off: [auth] mode is {self.console.config.auth.mode!r}; devices "
                               "are approved by code only in mode 'pair'")
        return None

    @staticmethod
    async def _body(request: web.Request, field: str) -> str | web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "body must be JSON")
        value = body.get(field) if isinstance(body, dict) else None
        if not isinstance(value, str) or not value.strip():
            return _error(400, f"body must be a JSON object with a string {field!r}")
        return value.strip()

    async def list_handler(self, request: web.Request) -> web.Response:
        refused = self._refused(request, change=False)
        if refused is not None:
            return refused
        return web.json_response(self.view(), headers=SECURITY_HEADERS)

    async def approve_handler(self, request: web.Request) -> web.Response:
        refused = self._refused(request, change=True)
        if refused is not None:
            return refused
        code = await self._body(request, "code")
        if isinstance(code, web.Response):
            return code
        if not _CODE.fullmatch(code):
            return _error(400, "'code' must be the 6 digits the device shows")
        assert self.registry is not None
        device = self.registry.approve(code, self.console.auth.sign)
        if device is None:
            return _error(404, f"no device is waiting with code {code} (codes last "
                               f"{CODE_TTL_S / 60:.0f} min)")
        log.info("console: paired %s (client %s), approved from %s", shown_id(device.device_id),
                 shown_id(device.client_id), request.remote)
        self.poll(force=True)
        return web.json_response({
            "paired": {"device_id": device.device_id, "client_id": device.client_id,
                       "approved_at": round(device.approved_at, 3)},
            "pairing": self.view(),
        }, headers=SECURITY_HEADERS)

    async def revoke_handler(self, request: web.Request) -> web.Response:
        refused = self._refused(request, change=True)
        if refused is not None:
            return refused
        device_id = await self._body(request, "device_id")
        if isinstance(device_id, web.Response):
            return device_id
        if len(device_id) > MAX_ID_CHARS:
            return _error(400, f"'device_id' is longer than {MAX_ID_CHARS} characters")
        assert self.registry is not None
        if not self.registry.revoke(device_id):
            return _error(404, f"{device_id!r} is not paired")
        # Its token no longer admits it; the connection it has now ends too (as a revocation is meant).
        live = [s for s in self.console.sessions if s.identity.device_id == device_id]
        for session in live:
            await session.outbox.close(CLOSE_UNAUTHORIZED, REVOKED_REASON)
        log.info("console: revoked %s from %s (%d live connection(s) closed)", shown_id(device_id),
                 request.remote, len(live))
        self.poll(force=True)
        return web.json_response({"revoked": device_id, "closed": len(live), "pairing": self.view()},
                                 headers=SECURITY_HEADERS)


def add_device_routes(app: web.Application, console: Console) -> DeviceApprovals:
    approvals = DeviceApprovals(console)
    console.extras["pairing"] = approvals.status_view
    console.pollers.append(approvals.poll)
    app.router.add_get("/api/devices", approvals.list_handler)
    app.router.add_post("/api/devices/approve", approvals.approve_handler)
    app.router.add_post("/api/devices/revoke", approvals.revoke_handler)
    return approvals
