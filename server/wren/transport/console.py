"""The web console: a page for people, served by `wren serve` itself (docs/server.md "Web console").

Routes (all behind `check_access`: the local network only, plus `[console] key` when set):
- `GET /` from a browser (`Accept: text/html`), or `GET /console/`: the page (static files in
  `wren/console/static/`, no build step); other clients still get the plain status line at `/`;
- `GET /api/status`: JSON: version, uptime, the connected devices, the recent turns with their latency split;
- `GET /api/events`: Server-Sent Events: `status` first, then `devices` (a device connected, disconnected or
  changed state) and `turn` (a finished turn's timing record, with what was heard and said);
- `GET /api/talk?device-id=browser-…&client-id=…`: what the page needs to talk as a device over the
  ordinary device WebSocket: its path, and a token in auth mode `token`;
- pairing (`/api/devices`, approve, revoke): wren.transport.console_devices, which adds its field to the
  status (`extras`) and its `pairing` events to the feed (`pollers`, `broadcast`).

What it reads: the live sessions (the transport's set, read-only) and the timing records the process
keeps (`wren.pipeline.timing.RECENT_TURNS`), picked up by one poller every 250 ms while the app runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from wren.config import Config, package_version
from wren.pipeline.timing import RECENT_TURNS
from wren.transport.auth import Authenticator

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parents[1] / "console" / "static"
STATIC_FILES = {"index.html": "text/html", "console.js": "text/javascript", "console.css": "text/css"}
LAN_NETWORKS = tuple(
    ipaddress.ip_network(net)
    for net in ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "::1/128", "fc00::/7",
                "fe80::/10")
)
BROWSER_PREFIX = "browser-"  # /api/talk hands tokens to browser devices only
MAX_TURNS = 50  # recent turns kept for the console (the oldest is dropped)
MAX_SUBSCRIBERS = 16  # live feeds at once; more get a 503
SUBSCRIBER_BACKLOG = 64  # events waiting for one slow feed; overflow ends that feed (the page reconnects)
POLL_S = 0.25
KEEPALIVE_S = 15.0
RECENT_DEVICE_S = 60.0  # a turn that finishes this long after its device left still belongs to this server
SECURITY_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:",
}


def is_lan_address(remote: str | None) -> bool:
    """Loopback or private (RFC 1918, fc00::/7 unique local, fe80::/10 link local); IPv4-mapped IPv6 too."""
    if not remote:
        return False
    try:
        address = ipaddress.ip_address(remote.split("%", 1)[0])  # fe80::1%eth0: the zone is not the address
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in LAN_NETWORKS)


@dataclass(frozen=True)
class Access:
    ok: bool
    status: int  # 200, 401 (key) or 403 (not the local network)
    reason: str


def check_access(remote: str | None, authorization: str, query_key: str, key: str) -> Access:
    """The console's rule: requests from the local network only; with `key` set, also the key."""
    if not is_lan_address(remote):
        return Access(False, 403, f"the Wren console answers the local network only (not {remote or '?'})")
    if key:
        scheme, _, bearer = authorization.strip().partition(" ")
        given = query_key or (bearer.strip() if scheme.lower() == "bearer" else "")
        if not given:
            return Access(False, 401, "this console needs its key: open it with ?key=<key>")
        if not hmac.compare_digest(given.encode(), key.encode()):
            return Access(False, 401, "wrong console key")
    return Access(True, 200, "ok")


class _Feed:
    """One live-feed client: a bounded backlog of encoded events."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=SUBSCRIBER_BACKLOG)
        self.lagging = False

    def offer(self, chunk: bytes | None) -> None:
        try:
            self.queue.put_nowait(chunk)
        except asyncio.QueueFull:
            self.lagging = True  # overflow policy: this feed ends; the page reconnects, gets a fresh status


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _audio(fmt: str, rate: int, frame_ms: int) -> str:
    return f"{fmt} {rate / 1000:g} kHz {frame_ms} ms"


class Console:
    def __init__(self, config: Config, sessions: set[Any], auth: Authenticator) -> None:
        self.config = config
        self.sessions = sessions  # the transport's live sessions: read here, never changed
        self.auth = auth
        self.started_at = time.time()
        self._started = time.monotonic()
        self._wall_offset = self.started_at - self._started  # monotonic → Unix time, fixed (no jitter)
        self.turns: deque[dict] = deque(maxlen=MAX_TURNS)
        self._last_turn: dict[str, dict] = {}  # device id → its newest turn (bounded by the devices seen)
        self._seen: dict[str, float] = {}  # device id → when it was last connected (pruned after a minute)
        self._last_record: dict | None = RECENT_TURNS[-1] if RECENT_TURNS else None  # older ones: not ours
        self._devices: dict[str, dict] = {}  # session id → the description last sent
        self._feeds: set[_Feed] = set()
        self._poller: asyncio.Task[None] | None = None
        self.extras: dict[str, Callable[[], Any]] = {}  # more status fields, built with each status
        self.pollers: list[Callable[[], None]] = []  # run with each poll (they broadcast their own events)

    # ---- access --------------------------------------------------------------------------------------

    def access(self, request: web.Request) -> Access:
        return check_access(request.remote, request.headers.get("Authorization", ""),
                            request.query.get("key", ""), self.config.console.key)

    @staticmethod
    def refusal(verdict: Access, page: bool = False) -> web.Response:
        log.info("console: refused (%s)", verdict.reason)
        if page:
            return web.Response(text=f"{verdict.reason}\n", status=verdict.status, headers=SECURITY_HEADERS)
        return web.json_response({"error": verdict.reason}, status=verdict.status, headers=SECURITY_HEADERS)

    @staticmethod
    def wants_page(request: web.Request) -> bool:
        return "text/html" in request.headers.get("Accept", "")

    # ---- what the page shows -------------------------------------------------------------------------

    def describe(self, session: Any) -> dict:
        identity = session.identity
        hello = getattr(session, "negotiated", None)
        device: dict[str, Any] = {
            "id": identity.device_id,
            "client_id": identity.client_id,
            "remote": identity.remote,
            "session_id": session.session_id,
            "state": str(getattr(session.state, "value", session.state)),
            "connected_since": round(session.connected_at + self._wall_offset, 3),
            "codec": None,
            "uplink": None,
            "downlink": None,
            "protocol_version": None,
            "last_turn": self._last_turn.get(identity.device_id),
        }
        if hello is not None:
            down = hello.downlink
            device.update(codec=hello.uplink_format, protocol_version=hello.protocol_version,
                          uplink=_audio(hello.uplink_format, hello.uplink_rate, hello.uplink_frame_ms),
                          downlink=_audio(down.format, down.sample_rate, down.frame_ms))
        return device

    def devices(self) -> list[dict]:
        live = sorted(self.sessions, key=lambda s: s.connected_at)
        return [self.describe(s) for s in live]

    def status(self) -> dict:
        return {
            "server": "wren",
            "version": package_version(),
            "started_at": round(self.started_at, 3),
            "uptime_s": round(time.monotonic() - self._started, 1),
            "auth_mode": self.config.auth.mode,
            "websocket_path": self.config.server.websocket_path,
            "devices": self.devices(),
            "turns": list(self.turns),
            **{name: build() for name, build in self.extras.items()},
        }

    # ---- the poller: new turn records and device changes, to every feed --------------------------------

    def _collect_turns(self) -> list[dict]:
        """Timing records finished since the last look that belong to this server's devices."""
        now = time.monotonic()
        for session in self.sessions:
            self._seen[session.identity.device_id] = now
        self._seen = {d: t for d, t in self._seen.items() if now - t < RECENT_DEVICE_S}
        records = list(RECENT_TURNS)  # one copy under the GIL: other servers' threads may append (tests)
        fresh: list[dict] = []
        for record in reversed(records):
            if record is self._last_record:
                break
            fresh.append(record)
        if records:
            self._last_record = records[-1]
        ours = []
        for record in reversed(fresh):
            if record.get("device") not in self._seen:
                continue  # another server in this process (tests)
            turn = {"at": round(time.time(), 3), **record}
            self.turns.append(turn)
            self._last_turn[turn["device"]] = turn
            ours.append(turn)
        for device in [d for d in self._last_turn if d not in self._seen]:
            del self._last_turn[device]
        return ours

    def _device_changes(self) -> dict | None:
        current = {d["session_id"]: d for d in self.devices()}
        if current == self._devices:
            return None
        connected = [d["id"] for sid, d in current.items() if sid not in self._devices]
        gone = [d["id"] for sid, d in self._devices.items() if sid not in current]
        self._devices = current
        return {"devices": list(current.values()), "connected": connected, "disconnected": gone}

    def poll(self, idle: bool = False) -> None:
        """What changed since the last look, to every feed (also run before a status is built, so a turn is
        never in a status without having been sent to the feeds). `idle`: the background poller's call."""
        for turn in self._collect_turns():  # always: the status lists the recent turns
            if self._feeds:
                self._broadcast(_sse("turn", turn))
        # Device changes only matter to a feed; with none, no 200-device diff and no JSON four times a
        # second. A new feed's own poll (events_handler) takes the baseline before it is added.
        changes = self._device_changes() if self._feeds or not idle else None
        if changes is not None and self._feeds:
            self._broadcast(_sse("devices", changes))
        for poller in self.pollers:
            poller()

    @property
    def has_feeds(self) -> bool:
        return bool(self._feeds)

    def broadcast(self, event: str, data: Any) -> None:
        self._broadcast(_sse(event, data))

    def _broadcast(self, chunk: bytes) -> None:
        for feed in list(self._feeds):
            feed.offer(chunk)

    async def _poll_forever(self) -> None:
        while True:
            try:
                self.poll(idle=True)
            except Exception:  # the console never takes the server down
                log.exception("console: poll failed")
            await asyncio.sleep(POLL_S)

    async def on_startup(self, app: web.Application) -> None:
        self._poller = asyncio.get_running_loop().create_task(self._poll_forever(), name="wren-console-poll")

    async def on_shutdown(self, app: web.Application) -> None:
        for feed in list(self._feeds):
            feed.lagging = True  # ends the feed even when its backlog is full
            feed.offer(None)
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None

    # ---- handlers ------------------------------------------------------------------------------------

    async def page(self, request: web.Request) -> web.StreamResponse:
        verdict = self.access(request)
        if not verdict.ok:
            return self.refusal(verdict, page=True)
        return web.FileResponse(STATIC_DIR / "index.html", headers=SECURITY_HEADERS)

    async def asset(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"] or "index.html"
        if name not in STATIC_FILES:
            raise web.HTTPNotFound()
        verdict = self.access(request)
        # The page needs the key; its script and style are not secret (they need the local network only).
        if not verdict.ok and (name == "index.html" or verdict.status == 403):
            return self.refusal(verdict, page=True)
        headers = {**SECURITY_HEADERS, "Content-Type": f"{STATIC_FILES[name]}; charset=utf-8"}
        return web.FileResponse(STATIC_DIR / name, headers=headers)

    async def status_handler(self, request: web.Request) -> web.Response:
        verdict = self.access(request)
        if not verdict.ok:
            return self.refusal(verdict)
        self.poll()
        return web.json_response(self.status(), headers=SECURITY_HEADERS)

    async def talk_handler(self, request: web.Request) -> web.Response:
        verdict = self.access(request)
        if not verdict.ok:
            return self.refusal(verdict)
        device_id = request.query.get("device-id", "").strip()
        client_id = request.query.get("client-id", "").strip()
        if not device_id.startswith(BROWSER_PREFIX) or len(device_id) > 64 or not client_id:
            return web.json_response(
                {"error": f"device-id must start with {BROWSER_PREFIX!r} (at most 64 characters); "
                          "client-id is required"}, status=400, headers=SECURITY_HEADERS)
        token = self.auth.sign(client_id, device_id)
        return web.json_response({
            "device_id": device_id, "client_id": client_id,
            "ws_path": self.config.server.websocket_path,
            "authorization": f"Bearer {token}" if token else "",
        }, headers=SECURITY_HEADERS)

    async def events_handler(self, request: web.Request) -> web.StreamResponse:
        verdict = self.access(request)
        if not verdict.ok:
            return self.refusal(verdict)
        if len(self._feeds) >= MAX_SUBSCRIBERS:
            return web.json_response({"error": "too many live feeds"}, status=503, headers=SECURITY_HEADERS)
        self.poll()  # what happened until now goes to the other feeds; this one starts from the status
        feed = _Feed()
        self._feeds.add(feed)
        response = web.StreamResponse(headers={**SECURITY_HEADERS, "Content-Type": "text/event-stream",
                                               "X-Accel-Buffering": "no"})
        try:
            await response.prepare(request)
            await response.write(b"retry: 2000\n\n" + _sse("status", self.status()))
            while not feed.lagging:
                try:
                    chunk = await asyncio.wait_for(feed.queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    chunk = b": keep-alive\n\n"
                if chunk is None or feed.lagging:
                    break
                await response.write(chunk)
        except (ConnectionError, RuntimeError):  # the page went away (aiohttp raises both)
            pass
        finally:
            self._feeds.discard(feed)
        return response


def add_console_routes(app: web.Application, config: Config, sessions: set[Any],
                       auth: Authenticator) -> Console:
    """The console's routes; `/` itself stays the transport's (it asks `wants_page` and `page`)."""
    console = Console(config, sessions, auth)
    app.router.add_get("/console/{name:[a-z.]*}", console.asset)
    app.router.add_get("/console", console.page)
    app.router.add_get("/api/status", console.status_handler)
    app.router.add_get("/api/events", console.events_handler)
    app.router.add_get("/api/talk", console.talk_handler)
    app.on_startup.append(console.on_startup)
    app.on_shutdown.append(console.on_shutdown)
    return console
