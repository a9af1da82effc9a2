"""The live device sessions, at most one per device id: a new connection takes over from the old one.

A device that reconnects (Wi-Fi dropped, it rebooted, a second client with the same id) must not leave
its previous session running beside the new one: both would use the same session key, so the agent's
per-key lock, history and timers would be shared with a reader that is already dead. `admit` closes the
old session first (1000 "replaced by a new connection", then its `DeviceSession.close` awaited, so its
reply, listener and tools are gone) and only then registers the new one. Admissions of one device id are
serialised by a lock of its own; other devices are not held up.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from shared_protocol.constants import CLOSE_NORMAL
from wren.transport.identity import shown_id

log = logging.getLogger(__name__)

REPLACED_REASON = "replaced by a new connection"


class LiveSessions:
    def __init__(self, sessions: set[Any]) -> None:
        self.sessions = sessions  # shared with the console, metrics, timers and shutdown
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}  # admissions holding or waiting for each lock

    async def admit(self, session: Any) -> int:
        """Close every live session of `session`'s device id, then register `session`; how many closed."""
        device_id = session.identity.device_id
        lock = self._locks.setdefault(device_id, asyncio.Lock())
        self._users[device_id] = self._users.get(device_id, 0) + 1
        try:
            async with lock:
                old = [s for s in self.sessions if s.identity.device_id == device_id]
                for previous in old:
                    await self._replace(previous)
                self.sessions.add(session)
                return len(old)
        finally:
            self._users[device_id] -= 1
            if not self._users[device_id]:
                del self._users[device_id], self._locks[device_id]

    async def _replace(self, previous: Any) -> None:
        log.info("device %s: %s (%s closed)", shown_id(previous.identity.device_id), REPLACED_REASON,
                 previous.session_id)
        self.sessions.discard(previous)
        for step in (lambda: previous.outbox.close(CLOSE_NORMAL, REPLACED_REASON), previous.close):
            try:  # its own handler's `close()` later finds it closed already
                await step()
            except Exception:  # the old one failing to close must not refuse the new one
                log.exception("device %s: closing the replaced session failed",
                              shown_id(previous.identity.device_id))

    def discard(self, session: Any) -> None:
        self.sessions.discard(session)
