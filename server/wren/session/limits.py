"""What one device may ask of the server (`[limits]`, docs/server.md "Limits"): the gates in front of the
inbox's consumers. Each is a few numbers per session, checked with no allocation per frame.

- `TypedGate`: `listen detect` texts, at most `typed_per_minute` (token bucket: a burst of that many, then
  one every 60/N s); the excess is refused (counted, logged once a minute). Long texts are cut.
- `UplinkGate`: binary frames faster than `uplink_realtime_factor` × real time (token bucket over the
  frames' negotiated duration, a burst of `UPLINK_BURST_S` of allowance) are dropped (counted, logged once);
  a device above `UPLINK_CLOSE_FACTOR` × real time for `UPLINK_CLOSE_AFTER_S` seconds in a row is to be
  closed (1008, the caller closes it).
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)

UPLINK_BURST_S = 4.0  # the window: a device may send factor × this many seconds of audio at once
UPLINK_CLOSE_FACTOR = 3.0  # sustained above this × real time ...
UPLINK_CLOSE_AFTER_S = 10  # ... for this many whole seconds in a row: the socket is closed (1008)
TYPED_LOG_EVERY_S = 60.0


def cut_text(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, at the last word boundary when there is one."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = text[:limit]
    if not text[limit].isspace():
        boundary = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
        if boundary > 0:
            head = head[:boundary]
    return head.rstrip()


class TypedGate:
    def __init__(self, per_minute: int, max_chars: int, name: str) -> None:
        self._rate = per_minute / 60.0  # tokens a second
        self._capacity = float(per_minute)
        self._tokens = float(per_minute)
        self._at = time.monotonic()
        self._max_chars = max_chars
        self._name = name
        self._next_log = 0.0
        self.refused = 0  # texts refused for coming too fast (SessionStats: typed_flood)

    def admit(self, now: float | None = None) -> bool:
        """One more `listen detect` text: True if it may be acted on."""
        if self._capacity <= 0:
            return True
        now = time.monotonic() if now is None else now
        self._tokens = min(self._capacity, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        self.refused += 1
        if now >= self._next_log:
            self._next_log = now + TYPED_LOG_EVERY_S
            log.warning("%s: typed texts faster than %d a minute; refusing the excess (%d refused so far)",
                        self._name, int(self._capacity), self.refused)
        return False

    def cut(self, text: str) -> str:
        cut = cut_text(text, self._max_chars)
        if len(cut) != len(text):
            log.info("%s: typed text of %d characters cut to %d (limits.typed_text_chars = %d)",
                     self._name, len(text), len(cut), self._max_chars)
        return cut


class UplinkGate:
    def __init__(self, factor: float, name: str, frame_ms: int = 60, now: float | None = None) -> None:
        self._factor = factor
        self._name = name
        self._frame_s = frame_ms / 1000
        self._capacity = factor * UPLINK_BURST_S  # seconds of audio
        self._credit = self._capacity
        now = time.monotonic() if now is None else now
        self._at = now
        self._second_at = now  # the current one-second bucket of the sustained-rate check
        self._second_audio = 0.0  # audio seconds received (dropped or not) in it
        self._fast_seconds = 0  # whole seconds in a row above UPLINK_CLOSE_FACTOR × real time
        self._logged = False
        self.dropped = 0  # frames dropped for coming too fast (SessionStats: uplink_flood)
        self.too_fast = False  # sustained flooding: the session closes the socket

    def set_frame_ms(self, frame_ms: int) -> None:
        self._frame_s = frame_ms / 1000

    def admit(self, now: float) -> bool:
        """One more binary frame: True if it may go to the inbox."""
        if self._factor <= 0:
            return True
        frame = self._frame_s
        elapsed = now - self._second_at
        if elapsed >= 1.0:
            fast = elapsed < 2.0 and self._second_audio > UPLINK_CLOSE_FACTOR * elapsed
            self._fast_seconds = self._fast_seconds + 1 if fast else 0
            if self._fast_seconds >= UPLINK_CLOSE_AFTER_S:
                self.too_fast = True
            self._second_at = now
            self._second_audio = 0.0
        self._second_audio += frame
        credit = self._credit + (now - self._at) * self._factor
        self._credit = credit if credit < self._capacity else self._capacity
        self._at = now
        if self._credit >= frame:
            self._credit -= frame
            return True
        self.dropped += 1
        if not self._logged:
            self._logged = True
            log.warning("%s: uplink audio faster than %g × real time; dropping the excess", self._name,
                        self._factor)
        return False
