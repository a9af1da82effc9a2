"""The ceiling on ASR streams open at once (`[limits] asr_streams`), the same for every engine.

Why a ceiling: every open stream holds a recogniser (pocketsphinx/vosk: its own decoder, ≈90 MB; moonshine:
its audio and queued decodes), and sessions open one per utterance, so without it a burst of speakers (or
a client opening utterances on purpose) grows memory without bound. Policy past it: refuse the new stream
with `AsrUnavailable` at once (never wait: the speaker would hear nothing either way, and a refused turn
is answered, see docs/server.md "Limits"); the streams already open are untouched.

An engine takes a `Slot` per stream in `open_stream()` and the stream releases it in `close()`. A stream
dropped without `close()` (a bug elsewhere) releases its slot when it is collected, so a leak can never
shrink the ceiling for good.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref

from wren.speech.asr.errors import AsrUnavailable

log = logging.getLogger(__name__)

LOG_EVERY_S = 60.0  # refusals are logged at most once a minute, with the count since the last line


class StreamCap:
    """At most `limit` streams open at once (0 = no limit); thread-safe."""

    def __init__(self, limit: int, engine: str) -> None:
        self.limit = max(0, int(limit))
        self.engine = engine
        self.open = 0
        self.refused = 0  # streams refused so far (only grows: /metrics)
        # Re-entrant: a collected stream releases its slot from a finalizer, which the garbage collector may
        # run inside this class's own critical section on the same thread.
        self._lock = threading.RLock()
        self._logged_at = -LOG_EVERY_S
        self._unlogged = 0

    def take(self) -> Slot:
        """A slot for one more stream; `AsrUnavailable` when `limit` are open."""
        with self._lock:
            full = bool(self.limit) and self.open >= self.limit
            if not full:
                self.open += 1
        if full:
            raise self.refuse(f"{self.limit} ASR streams are open ([limits] asr_streams)")
        return Slot(self)

    def refuse(self, why: str) -> AsrUnavailable:
        """Count a refused stream (also those refused for another reason: no worker has room) and log it
        rate-limited; returns the error to raise."""
        now = time.monotonic()
        with self._lock:
            self.refused += 1
            self._unlogged += 1
            due = now - self._logged_at >= LOG_EVERY_S
            if due:
                count, self._unlogged, self._logged_at = self._unlogged, 0, now
        if due:
            log.warning("asr: %s; refusing new utterances (%d refused since the last such line)", why, count)
        return AsrUnavailable(f"{why}: this utterance is not listened to")

    def _release(self) -> None:
        with self._lock:
            self.open = max(0, self.open - 1)


class Slot:
    """One stream's place under the ceiling. `release()` is idempotent."""

    __slots__ = ("__weakref__", "_cap")

    def __init__(self, cap: StreamCap) -> None:
        self._cap: StreamCap | None = cap

    def held_by(self, stream: object) -> None:
        """Release this slot when `stream` is collected, should nobody close it."""
        weakref.finalize(stream, self.release)

    def release(self) -> None:
        cap, self._cap = self._cap, None
        if cap is not None:
            cap._release()
