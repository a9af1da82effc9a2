"""A device session's link to its timers (`wren.agent.timers`): keep the socket, tell the device.

- `holds()`: the device has a pending timer, alarm or reminder. Its session must then stay open: the
  idle timer does not close it and the rule of three does not say goodbye, or the announcement could
  never be spoken (a stock device only reconnects when someone talks to it again).
- `tick()`, called every second by the session's idle watch once the hello is done, sends
  `{"session_id": S, "type": "wren_timers", "pending": N, "next_s": T}` when N changes and every
  `KEEPALIVE_S` while N > 0 (docs/protocol.md, "Wren extensions"). It is a data frame, so it also
  refreshes the 120 s inactivity window of any xiaozhi device (reference §8.3: WebSocket pings do not
  count); a stock device logs the unknown type and ignores it (reference §5); the Wren firmware keeps
  its channel (and reopens a lost one) while N > 0.
- `connected()`, after the first hello: announcements already due for this device are spoken now.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from wren.session.services import ConnectionClosed

log = logging.getLogger(__name__)

TIMERS_MESSAGE = "wren_timers"
KEEPALIVE_S = 60.0  # well inside the 120 s after which a xiaozhi device counts a silent channel as closed


class TimerStatus(Protocol):
    """What the session needs of `wren.agent.timers.TimerService`."""

    def has_pending(self, session_key: str) -> bool: ...

    def status(self, session_key: str) -> tuple[int, float | None]: ...

    def device_connected(self, session_key: str) -> None: ...


class TimerLink:
    def __init__(
        self,
        session_key: str,
        session_id: str,
        timers: TimerStatus | None,
        send: Callable[[dict], Awaitable[None]],
    ) -> None:
        self.session_key = session_key
        self.session_id = session_id
        self._timers = timers  # None when the agent keeps no timers (e.g. a test double)
        self._send = send
        self._sent_count = 0
        self._sent_at = 0.0

    def holds(self) -> bool:
        return self._timers is not None and self._timers.has_pending(self.session_key)

    def connected(self) -> None:
        if self._timers is not None:
            self._timers.device_connected(self.session_key)

    async def tick(self) -> None:
        if self._timers is None:
            return
        count, next_s = self._timers.status(self.session_key)
        now = time.monotonic()
        if count == self._sent_count and (count == 0 or now - self._sent_at < KEEPALIVE_S):
            return
        msg: dict = {"session_id": self.session_id, "type": TIMERS_MESSAGE, "pending": count}
        if next_s is not None:
            msg["next_s"] = math.ceil(next_s)
        try:
            await self._send(msg)
        except ConnectionClosed:
            return
        except Exception:
            log.exception("%s: sending the timer status failed", self.session_key)
            return
        self._sent_count, self._sent_at = count, now
