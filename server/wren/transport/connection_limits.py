"""Bounds on connections themselves (`[limits]` connections, connections_per_ip, handshake_timeout_s,
keepalive_timeout_s; docs/server.md "Limits"), before any session exists.

- `HandshakeDeadline`: a TCP connection that has not sent a complete HTTP request head within
  `handshake_timeout_s` is closed. aiohttp has one timer for a connection before its first request and
  between requests (`keepalive_timeout`, armed at connect); the first window here is shorter and
  separate, so a thousand sockets that connect and say nothing cost seconds, not the keep-alive time.
  It hooks the low-level `web.Server` (`connection_made`, `request_factory`, `connection_lost`), which is
  why `WrenRunner` (an `AppRunner`) attaches it once the server exists.
- `WebSocketSlots`: open WebSocket sessions, counted globally and per peer address; past either cap a new
  upgrade is answered 503 / 429 with a reason before it is upgraded, so a refused client costs one
  short HTTP reply and never a session.
Refusals and handshake timeouts are logged at most once a minute each (with the count since), so a flood
cannot flood the log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web

from wren.config import LimitsConfig

log = logging.getLogger(__name__)

LOG_EVERY_S = 60.0
NO_LIMIT_S = 10 * 365 * 24 * 3600.0  # aiohttp's keepalive_timeout=0 means "close at once", not "never"
RETRY_AFTER_S = 5  # the Retry-After header of a refused upgrade


def keepalive_handler_args(limits: LimitsConfig) -> dict[str, Any]:
    """`web.Application(handler_args=...)`: aiohttp's own keep-alive timer, 0 meaning no limit."""
    seconds = limits.keepalive_timeout_s
    return {"keepalive_timeout": seconds if seconds > 0 else NO_LIMIT_S}


class _EveryMinute:
    """One log line for the first event, then at most one a minute with how many happened since."""

    def __init__(self) -> None:
        self._next = 0.0
        self._since = 0
        self.total = 0

    def note(self, message: str, *args: object) -> None:
        self.total += 1
        self._since += 1
        now = time.monotonic()
        if now >= self._next:
            self._next = now + LOG_EVERY_S
            log.warning(message + " (%d since the last such line)", *args, self._since)
            self._since = 0


class HandshakeDeadline:
    """Closes connections that send no complete request head within `seconds` of connecting."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._timers: dict[Any, asyncio.TimerHandle] = {}  # RequestHandler → its deadline
        self._log = _EveryMinute()

    @property
    def closed(self) -> int:
        """Connections closed for sending no request in time (tests, logs)."""
        return self._log.total

    @property
    def waiting(self) -> int:
        """Connections not yet past their first request head."""
        return len(self._timers)

    def attach(self, server: web.Server) -> None:
        """Hook `server` before a site listens (each RequestHandler copies `request_factory` when made)."""
        if self.seconds <= 0:
            return
        made, lost, factory = server.connection_made, server.connection_lost, server.request_factory
        loop = asyncio.get_running_loop()

        def connection_made(handler: Any, transport: asyncio.Transport) -> None:
            made(handler, transport)
            self._timers[handler] = loop.call_later(self.seconds, self._expire, handler, transport)

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            self._disarm(handler)
            lost(handler, exc)

        def request_factory(message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> Any:
            self._disarm(protocol)  # a complete head arrived: from here on aiohttp's keep-alive timer rules
            return factory(message, payload, protocol, writer, task)

        # Instance attributes: the hooks live and die with this one server, aiohttp's classes are untouched.
        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]
        server.request_factory = request_factory

    def _disarm(self, handler: Any) -> None:
        timer = self._timers.pop(handler, None)
        if timer is not None:
            timer.cancel()

    def _expire(self, handler: Any, transport: asyncio.Transport) -> None:
        if self._timers.pop(handler, None) is None or transport.is_closing():
            return
        peer = transport.get_extra_info("peername")
        self._log.note("closed a connection from %s: no HTTP request within %g s",
                       peer[0] if isinstance(peer, tuple) else "?", self.seconds)
        transport.close()  # connection_lost follows and lets aiohttp clean the handler up


class WebSocketSlots:
    """Open WebSocket sessions: `refusal` says whether one more from `remote` may be upgraded, `held` holds a
    slot for as long as its handler runs (a slot is taken before the upgrade and freed when it ends)."""

    def __init__(self, total: int, per_ip: int) -> None:
        self.total = total
        self.per_ip = per_ip
        self.open = 0
        self._by_ip: dict[str, int] = {}
        self._log = {429: _EveryMinute(), 503: _EveryMinute()}

    def refused(self, status: int) -> int:
        """Upgrades refused with `status` (429 or 503) so far."""
        return self._log[status].total

    def from_ip(self, remote: str) -> int:
        return self._by_ip.get(remote, 0)

    def refusal(self, remote: str) -> web.Response | None:
        """The HTTP answer refusing one more WebSocket from `remote`, or None when it may have a slot."""
        if self.total > 0 and self.open >= self.total:
            status, reason = 503, f"server busy: {self.total} connections open, try again later"
        elif self.per_ip > 0 and self.from_ip(remote) >= self.per_ip:
            status, reason = 429, f"too many connections from your address (at most {self.per_ip})"
        else:
            return None
        self._log[status].note("refused a WebSocket from %s with %d: %s", remote, status, reason)
        return web.Response(status=status, text=reason, headers={"Retry-After": str(RETRY_AFTER_S)})

    @contextmanager
    def held(self, remote: str) -> Iterator[None]:
        self.open += 1
        self._by_ip[remote] = self.from_ip(remote) + 1
        try:
            yield
        finally:
            self.open -= 1
            left = self._by_ip[remote] - 1
            if left:
                self._by_ip[remote] = left
            else:
                del self._by_ip[remote]  # no entry per address ever seen: the dict stays as small as `open`


HANDSHAKE_KEY = web.AppKey("wren_handshake_deadline", HandshakeDeadline)
SLOTS_KEY = web.AppKey("wren_websocket_slots", WebSocketSlots)


class WrenRunner(web.AppRunner):
    """An AppRunner that attaches the app's handshake deadline to its server as soon as there is one."""

    async def setup(self) -> None:
        await super().setup()
        deadline = self.app.get(HANDSHAKE_KEY)
        if deadline is not None and self.server is not None:
            deadline.attach(self.server)
