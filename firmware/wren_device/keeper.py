# Keeps the channel while the server holds a timer for this device (docs/protocol.md, Wren extensions).
# Reference §8.3: with no incoming data for channel_timeout_s (120 s) the channel counts as closed, and
# it is reopened only at the next interaction. A Wren server with a pending timer, alarm or reminder for
# us sends {"type":"wren_timers","pending":N,"next_s":S} on every change and about once a minute. While
# N > 0 the server will speak on this socket unprompted (tts start .. tts stop, played even when idle), so:
# - the inactivity rule is suspended;
# - a channel lost for any reason (server restart, network) is reopened, idle and without listening, with
#   a few spaced tries, so the timer still rings.
# N is the word of the current connection only: it is forgotten when the channel closes; after a reopen
# the server repeats it.
import asyncio
import json

from shared_protocol.constants import TYPE_WREN_TIMERS
from wren_device.log import log

_REOPEN_TRIES = 4  # each is a whole Channel.open() (with its own backoff), spaced by _REOPEN_GAP_MS
_REOPEN_GAP_MS = 20000


class Keeper:
    def __init__(self, channel, limit_s, post, on_closed):
        # post(kind): queue an event for the device's main loop; on_closed(why): the device's handler.
        self.channel = channel
        self.limit_ms = limit_s * 1000
        self._post = post
        self._on_closed = on_closed
        self.pending = 0
        self._tries = 0

    def on_unknown(self, err, data):
        # A type shared_protocol does not know: ours (parsed here, leniently), or ignored (reference §5).
        if err.type != TYPE_WREN_TIMERS:
            log("recv", "ignored:", err)
            return
        try:
            n = json.loads(str(bytes(data), "utf-8")).get("pending")
        except (ValueError, AttributeError, TypeError):  # UnicodeError is a ValueError
            return
        if type(n) is int and n >= 0:  # not a bool (an int subclass on CPython)
            if n != self.pending:
                log("timers", "%d pending on the server" % n)
            self.pending = n

    def lost(self):
        # The channel closed. If a timer was due to ring on it, open a new one (the main loop does it).
        if self.pending:
            log("timers", "channel lost with %d pending: reopening" % self.pending)
            self.pending = 0
            self._tries = _REOPEN_TRIES
            self._post("reopen")

    def reopened(self, ok):
        # After a reopen attempt by the main loop: a failed one is tried again later, a few times.
        self._tries = 0 if ok else self._tries - 1
        if self._tries > 0:
            asyncio.create_task(self._later())

    async def _later(self):
        await asyncio.sleep_ms(_REOPEN_GAP_MS)
        self._post("reopen")

    async def run(self):
        # The inactivity watchdog (§8.3), off while the server holds a timer for us.
        ch = self.channel
        while True:
            await asyncio.sleep_ms(1000)
            if ch.ready and not self.pending and ch.idle_ms() > self.limit_ms:
                log("channel", "no data for %d s: treated as closed" % (self.limit_ms // 1000))
                ch.ready = False
                self._on_closed("inactivity")
