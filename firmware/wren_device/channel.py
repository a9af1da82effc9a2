# The audio channel (reference §1, §3, §8.3): WebSocket with the xiaozhi headers, the hello exchange, a
# reader task that must always run (it answers pings, even during playback), and reconnection with
# exponential backoff. Opened lazily on the first interaction and reused across turns.
import asyncio
import time

from micropython import const

from shared_protocol import messages
from wren_device.log import log
from wren_device.ws import NEED, OP_BINARY, OP_TEXT, WsClosed

_HELLO_TIMEOUT_MS = 10000  # §3.2: no server hello within 10 s -> give up on this attempt
_POLL_MS = const(10)  # the receive loop's sleep while messages flow
_IDLE_POLL_MS = const(50)  # ... and after _BUSY_POLLS empty polls (a quiet second)
_BUSY_POLLS = const(100)


class Channel:
    def __init__(self, cfg, identity, url, token, version, hello, handler, ws):
        # hello: the device hello dict; handler: on_frame(op, data) coroutine (text), on_audio(buf, n) and
        # on_closed(why) functions.
        self.cfg = cfg
        self.identity = identity
        self.url = url
        self.token = token
        self.version = version
        self._device_hello = hello
        self._handler = handler
        self.ws = ws
        self.session_id = ""
        self.ready = False
        self.last_rx = time.ticks_ms()
        self._hello = asyncio.Event()
        self._receiver = None

    def usable(self):
        return self.ready and self.ws.open

    def idle_ms(self):
        return time.ticks_diff(time.ticks_ms(), self.last_rx)

    def headers(self):
        h = {"Protocol-Version": str(self.version), "Device-Id": self.identity["device_id"],
             "Client-Id": self.identity["client_id"]}
        if self.token:  # §1.2: "Bearer " is added unless the stored token already names its scheme
            h["Authorization"] = self.token if " " in self.token else "Bearer " + self.token
        return h

    async def open(self):
        # -> True once connected and the server hello arrived; retries with backoff 0.5, 1, 2, 4, 8 s.
        delay = 500
        attempts = self.cfg.get("connect_attempts", 6)
        for attempt in range(1, attempts + 1):
            try:
                await self._connect_once()
                return True
            except (WsClosed, OSError, asyncio.TimeoutError, ValueError) as e:
                log("channel", "attempt %d/%d failed: %r" % (attempt, attempts, e))
            if attempt < attempts:
                log("channel", "reconnect in %d ms" % delay)
                await asyncio.sleep_ms(delay)
                delay = min(delay * 2, 8000)
        return False

    async def _connect_once(self):
        await self.drop()
        log("channel", "connecting to", self.url)
        await self.ws.connect(self.url, self.headers())
        self._hello.clear()
        self._receiver = asyncio.create_task(self._receive())
        await self.ws.send_text(messages.encode(self._device_hello))
        await asyncio.wait_for_ms(self._hello.wait(), _HELLO_TIMEOUT_MS)
        if not self.ws.open:
            raise WsClosed(1006, "closed before the server hello")
        self.ready = True
        self.last_rx = time.ticks_ms()
        log("channel", "open, session", self.session_id)

    def hello_accepted(self, msg):
        # The device accepted a server hello: keep its session_id (§3.2) and finish the connect.
        if isinstance(msg.get("session_id"), str):
            self.session_id = msg["session_id"]
        self._hello.set()

    async def drop(self):
        self.ready = False
        if self._receiver is not None:
            self._receiver.cancel()
            self._receiver = None
        await self.ws.close()

    async def send(self, msg):
        # -> False when the text frame could not be sent; the channel is then closed (§8.3).
        try:
            await self.ws.send_text(messages.encode(msg))
            return True
        except WsClosed as e:
            log("channel", "send failed:", e.reason)
            self.ready = False
            self._handler.on_closed("send failed")
            return False

    async def _receive(self):
        # The receive loop takes every message that has arrived (ws.pump(), non-blocking) and, when none
        # has, sleeps a little: asyncio.sleep_ms is the one wait that allocates nothing, so audio messages
        # go from the socket to the jitter ring without a coroutine call or an allocation. It polls every
        # 10 ms while data flows, every 50 ms after a quiet second.
        ws = self.ws
        quiet = 0
        try:
            while True:
                op = ws.pump()
                if op == NEED:
                    quiet += 1
                    await asyncio.sleep_ms(_POLL_MS if quiet < _BUSY_POLLS else _IDLE_POLL_MS)
                    continue
                quiet = 0
                if op != OP_BINARY and op != OP_TEXT:
                    await ws.control(op)  # ping answered, pong ignored; a close or an error raises
                    continue
                self.last_rx = time.ticks_ms()  # only data frames count
                try:
                    if op == OP_BINARY:  # audio: handled in place, no coroutine, nothing allocated
                        self._handler.on_audio(ws.rx, ws.rx_len)
                    else:
                        await self._handler.on_frame(op, memoryview(ws.rx)[: ws.rx_len])
                except WsClosed:
                    raise
                except Exception as e:  # one bad frame (or a MemoryError) must not end the session
                    log("recv", "error handling a frame:", repr(e))
        except WsClosed as e:
            log("channel", "closed by the server: %d %s" % (e.code, e.reason))
            self._receiver = None
            self.ready = False
            self._hello.set()  # wake a connect still waiting for the hello
            self._handler.on_closed("closed")
