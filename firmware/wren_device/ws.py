# Minimal RFC 6455 WebSocket client on asyncio streams (notes §3.2). Audio send and receive reuse
# preallocated buffers: the header and mask live in fixed bytearrays, payloads are masked in place by viper,
# and a received message lies at the start of one receive buffer (valid until the next receive). No view is
# made per message length (Opus packets vary): sends go out as socket.write(buf, 0, n), receives as
# readinto(buf, n); an audio frame sent when the socket takes it at once allocates nothing (no coroutine).
import asyncio
import os
import random
import struct

from micropython import const

from shared_protocol.constants import CLOSE_NORMAL
from wren_device import dsp
from wren_device.ws_handshake import HandshakeError, handshake
from wren_device.ws_rx import ERROR, NEED, Receiver  # noqa: F401 (NEED: for the channel's loop)

OP_CONT = const(0)
OP_TEXT = const(1)
OP_BINARY = const(2)
OP_CLOSE = const(8)
OP_PING = const(9)
OP_PONG = const(10)

CLOSE_NO_STATUS = const(1005)  # never on the wire: a received close frame without a code
CLOSE_ABNORMAL = const(1006)  # never on the wire: the TCP connection just went away


class WsClosed(Exception):
    # The connection is over; .code is the close code (1006 when the TCP stream ended without a close).
    def __init__(self, code, reason=""):
        super().__init__(code, reason)
        self.code = code
        self.reason = reason


class WebSocket(Receiver):
    def __init__(self, max_message=16384):
        self._rx_init(max_message)
        self._hdr = bytearray(14)
        self._mask = bytearray(4)
        self._lock = asyncio.Lock()
        self._r = self._w = None
        self.open = False
        self._close_sent = False
        self.close_code = None

    # ---- connect -------------------------------------------------------------------------------------
    async def connect(self, url, headers=None, timeout_ms=10000, ssl_context=None):
        # xiaozhi: the 101 reply must arrive within 10 s (reference §1.2).
        await asyncio.wait_for_ms(self._connect(url, headers or {}, ssl_context), timeout_ms)

    async def _connect(self, url, headers, ssl_context):
        random.seed(struct.unpack("<I", os.urandom(4))[0])  # mask keys: a PRNG seeded from the OS RNG
        try:
            self._r, self._w = await handshake(url, headers, ssl_context)
        except HandshakeError as e:
            raise WsClosed(e.code, e.reason)
        self._rx_reset()
        self.open = True
        self._close_sent = False
        self.close_code = None

    # ---- send (one write path: lock, write, drain; any failure -> WsClosed) ----------------------------
    async def send_text(self, text):
        data = bytearray(text.encode() if isinstance(text, str) else text)
        await self._send(OP_TEXT, data, len(data))

    def send_binary(self, buf, n):
        # -> an awaitable; buf is masked in place (the caller must treat it as consumed: a scratch buffer).
        # When nothing else is being sent and the socket takes the frame at once (the usual case) it is
        # written here and the awaitable is asyncio.sleep_ms(0): one yield, nothing allocated.
        w = self._w
        if not self.open or w is None or self._lock.locked() or w.out_buf:
            return self._send(OP_BINARY, buf, n)
        try:
            hl = self.prepare_frame(OP_BINARY, buf, n)
            self._write(w, self._hdr, hl)
            self._write(w, buf, n)
        except OSError as e:
            return self._lost(e)
        if w.out_buf:
            return self._send(OP_BINARY, buf, 0)  # the socket was full: drain what was kept
        return asyncio.sleep_ms(0)

    async def _lost(self, e):
        self.open = False
        await self._abort()
        raise WsClosed(CLOSE_ABNORMAL, "send failed: %s" % e)

    @staticmethod
    def _write(w, buf, n):
        # buf[:n] to the asyncio stream w: straight to its socket when nothing is queued; what the socket
        # does not take is kept in w.out_buf (a copy: allocates, only when the socket is full).
        if n <= 0:
            return
        done = 0
        if not w.out_buf:
            done = w.s.write(buf, 0, n) or 0
        if done < n:
            w.out_buf += bytes(memoryview(buf)[done:n])

    async def _send(self, opcode, payload, n):
        # n == 0 with OP_BINARY: only drain what a full socket left queued.
        if not self.open or self._w is None:
            raise WsClosed(self.close_code or CLOSE_ABNORMAL, "not open")
        await self._lock.acquire()
        try:
            if n or opcode != OP_BINARY:
                hl = self.prepare_frame(opcode, payload, n)
                self._write(self._w, self._hdr, hl)
                self._write(self._w, payload, n)
            await self._w.drain()
        except OSError as e:
            self.open = False
            await self._abort()
            raise WsClosed(CLOSE_ABNORMAL, "send failed: %s" % e)
        finally:
            self._lock.release()

    def prepare_frame(self, opcode, payload, n):
        # Header for `n` bytes of payload in self._hdr, payload masked in place -> header length.
        hl = self._frame_header(opcode, n)
        dsp.xor_mask(payload, n, self._mask)
        return hl

    def _frame_header(self, opcode, n):
        # Fills the preallocated header (FIN + opcode, MASK + minimal length, fresh key) -> its length.
        h = self._hdr
        m = self._mask
        struct.pack_into(">HH", m, 0, random.getrandbits(16), random.getrandbits(16))
        h[0] = 0x80 | opcode
        if n < 126:
            h[1] = 0x80 | n
            at = 2
        elif n < 65536:
            h[1] = 0xFE
            struct.pack_into(">H", h, 2, n)
            at = 4
        else:
            h[1] = 0xFF
            struct.pack_into(">II", h, 2, 0, n)
            at = 10
        h[at] = m[0]
        h[at + 1] = m[1]
        h[at + 2] = m[2]
        h[at + 3] = m[3]
        return at + 4

    # ---- receive (the parser is wren_device.ws_rx.Receiver) -------------------------------------------
    async def control(self, op):
        # What pump() returned besides a data message: a ping is answered, a pong ignored, a close echoed
        # and raised as WsClosed, an error closes (protocol: with its code) and raises.
        n = self.ctl_len
        if op == ERROR:
            code, reason = self._err_code, self._err_reason
            if code == CLOSE_ABNORMAL:
                self.open = False
                await self._abort()
                raise WsClosed(code, reason)
            await self._fail(code, reason)
        elif op == OP_PING:
            await self._send(OP_PONG, self._ctl, n)
        elif op == OP_CLOSE:
            code = ((self._ctl[0] << 8) | self._ctl[1]) if n >= 2 else CLOSE_NO_STATUS
            reason = bytes(self._ctl[2:n]).decode() if n > 2 else ""
            self.close_code = code
            if not self._close_sent:
                # Echo the close (RFC 6455 §5.5.1); 1005 must not go on the wire, so answer with no code.
                await self._send_close(code if code != CLOSE_NO_STATUS else None)
            self.open = False
            await self._abort()
            raise WsClosed(code, reason)

    async def _send_close(self, code, reason=""):
        self._close_sent = True
        if code is None:
            await self._send(OP_CLOSE, self._ctl, 0)
            return
        data = bytearray(2 + len(reason))
        struct.pack_into(">H", data, 0, code)
        if reason:
            data[2:] = reason.encode()
        await self._send(OP_CLOSE, data, len(data))

    async def _fail(self, code, reason):
        try:
            await self._send_close(code, reason)
            # Read and discard what the peer still sends until it closes: dropping the socket with unread
            # data makes TCP send a reset that can destroy our close frame before the peer reads it.
            await asyncio.wait_for_ms(self._discard(), 1000)
        except (WsClosed, asyncio.TimeoutError, OSError):
            pass
        self.open = False
        self.close_code = code
        await self._abort()
        raise WsClosed(code, reason)

    # ---- close ---------------------------------------------------------------------------------------
    async def close(self, code=CLOSE_NORMAL, reason=""):
        # Sends a close and waits briefly for the echo, then drops the TCP connection.
        if self.open and not self._close_sent:
            try:
                await self._send_close(code, reason)
                await asyncio.wait_for_ms(self._drain_until_close(), 2000)
            except (WsClosed, asyncio.TimeoutError, OSError):
                pass
        self.open = False
        await self._abort()

    async def _discard(self):
        while await self._r.readinto(self._rx):
            pass

    async def _drain_until_close(self):
        while True:
            await self.recv()

    async def _abort(self):
        self.open = False
        w = self._w
        self._w = self._r = None
        if w is not None:
            try:
                w.close()
                await w.wait_closed()
            except OSError:
                pass
