# The audio channel (reference §1, §3, §8.3): WebSocket with the xiaozhi headers, the hello exchange, a
# reader task that must always run (it answers pings, even during playback), and reconnection with
# exponential backoff. Opened lazily on the first interaction and reused across turns.
import asyncio
import time

from shared_protocol import messages
from wren_device.log import log
from wren_device.ws import WsClosed

_HELLO_TIMEOUT_MS = 10000  # §3.2: no server hello within 10 s -> give up on this attempt


class Channel:
    def __init__(self, cfg, identity, url, token, version, hello, handler, ws):
        # hello: the device hello dict; handler: on_frame(op, data) coroutine, on_closed(why) function.
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
        try:
            while True:
                op, data = await self.ws.recv()
                self.last_rx = time.ticks_ms()  # only data frames count; pings are handled in ws
                try:
                    await self._handler.on_frame(op, data)
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
