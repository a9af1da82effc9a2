# Minimal RFC 6455 WebSocket client on asyncio streams (notes §3.2). Audio send and receive reuse
# preallocated buffers: the header and mask live in fixed bytearrays, payloads are masked in place by viper,
# and a received message is a memoryview into one receive buffer (valid until the next recv()).
import asyncio
import os
import random
import struct

from micropython import const

from shared_protocol.constants import CLOSE_NORMAL, CLOSE_PROTOCOL_ERROR, CLOSE_TOO_BIG
from wren_device import dsp
from wren_device.ws_handshake import HandshakeError, handshake

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


class WebSocket:
    def __init__(self, max_message=16384):
        self.max_message = max_message
        self._rx = bytearray(max_message)
        self._rxmv = memoryview(self._rx)
        self._views = {}  # length -> view of _rx; audio messages have one size, so one view is reused
        self._hdr = bytearray(14)
        hm = memoryview(self._hdr)
        self._hdr_views = (hm[:6], hm[:8], hm[:14])
        self._rh = bytearray(8)
        rm = memoryview(self._rh)
        self._rh2 = rm[:2]
        self._rh8 = rm
        self._ctl = bytearray(125)
        self._ctlmv = memoryview(self._ctl)
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
        self.open = True
        self._close_sent = False
        self.close_code = None

    # ---- send (one write path: lock, write, drain; any failure -> WsClosed) ----------------------------
    async def send_text(self, text):
        data = bytearray(text.encode() if isinstance(text, str) else text)
        await self._send(OP_TEXT, data, len(data))

    async def send_binary(self, buf, n):
        # buf is masked in place: the caller must treat it as consumed (it is a scratch send buffer).
        await self._send(OP_BINARY, buf, n)

    async def _send(self, opcode, payload, n):
        if not self.open or self._w is None:
            raise WsClosed(self.close_code or CLOSE_ABNORMAL, "not open")
        await self._lock.acquire()
        try:
            hv = self.prepare_frame(opcode, payload, n)
            self._w.write(hv)
            if n:
                self._w.write(payload if len(payload) == n else memoryview(payload)[:n])
            await self._w.drain()
        except OSError as e:
            self.open = False
            await self._abort()
            raise WsClosed(CLOSE_ABNORMAL, "send failed: %s" % e)
        finally:
            self._lock.release()

    def prepare_frame(self, opcode, payload, n):
        # Header for `n` bytes of payload, payload masked in place -> header view. Allocates nothing.
        hv = self._frame_header(opcode, n)
        dsp.xor_mask(payload, n, self._mask)
        return hv

    def _frame_header(self, opcode, n):
        # Fills the preallocated header (FIN + opcode, MASK + minimal length, fresh key).
        h = self._hdr
        m = self._mask
        struct.pack_into(">HH", m, 0, random.getrandbits(16), random.getrandbits(16))
        h[0] = 0x80 | opcode
        if n < 126:
            h[1] = 0x80 | n
            at, hv = 2, self._hdr_views[0]
        elif n < 65536:
            h[1] = 0xFE
            struct.pack_into(">H", h, 2, n)
            at, hv = 4, self._hdr_views[1]
        else:
            h[1] = 0xFF
            struct.pack_into(">II", h, 2, 0, n)
            at, hv = 10, self._hdr_views[2]
        h[at] = m[0]
        h[at + 1] = m[1]
        h[at + 2] = m[2]
        h[at + 3] = m[3]
        return hv

    # ---- receive -------------------------------------------------------------------------------------
    def _view(self, n):
        v = self._views.get(n)
        if v is None:
            if len(self._views) > 16:
                self._views.clear()
            v = self._views[n] = self._rxmv[:n]
        return v

    async def _fill(self, mv):
        if self._r is None:
            raise WsClosed(self.close_code or CLOSE_ABNORMAL, "not open")
        n = len(mv)
        got = await self._r.readinto(mv)
        while got and got < n:
            k = await self._r.readinto(mv[got:])
            if not k:
                got = 0
                break
            got += k
        if n and not got:
            self.open = False
            raise WsClosed(CLOSE_ABNORMAL, "connection lost")

    async def recv(self):
        # -> (opcode, memoryview) of one whole data message. Pings are answered, pongs ignored, a close is
        # echoed and raised as WsClosed. Size is checked on the declared length before reading the payload.
        if not self.open:
            raise WsClosed(self.close_code or CLOSE_ABNORMAL, "not open")
        total = 0
        msg_op = -1
        rh = self._rh
        try:
            while True:
                await self._fill(self._rh2)
                b0 = rh[0]
                b1 = rh[1]
                fin = b0 & 0x80
                op = b0 & 0x0F
                n = b1 & 0x7F
                if b0 & 0x70:
                    await self._fail(CLOSE_PROTOCOL_ERROR, "reserved bits set")
                if b1 & 0x80:
                    await self._fail(CLOSE_PROTOCOL_ERROR, "masked frame from server")
                if n == 126:
                    await self._fill(self._rh2)
                    n = (rh[0] << 8) | rh[1]
                elif n == 127:
                    await self._fill(self._rh8)
                    hi, n = struct.unpack_from(">II", rh)
                    if hi:
                        n = self.max_message + 1
                if op >= 8:
                    if n > 125 or not fin:
                        await self._fail(CLOSE_PROTOCOL_ERROR, "bad control frame")
                    await self._control(op, n)
                    continue
                if op == OP_CONT:
                    if msg_op < 0:
                        await self._fail(CLOSE_PROTOCOL_ERROR, "continuation without a start")
                elif op in (OP_TEXT, OP_BINARY):
                    if msg_op >= 0:
                        await self._fail(CLOSE_PROTOCOL_ERROR, "new message inside a fragmented one")
                    msg_op = op
                else:
                    await self._fail(CLOSE_PROTOCOL_ERROR, "unknown opcode")
                if total + n > self.max_message:
                    await self._fail(CLOSE_TOO_BIG, "message too big")
                if n:
                    await self._fill(self._view(n) if total == 0 else self._rxmv[total : total + n])
                total += n
                if fin:
                    return msg_op, self._view(total)
        except OSError as e:
            self.open = False
            await self._abort()
            raise WsClosed(CLOSE_ABNORMAL, "receive failed: %s" % e)

    async def _control(self, op, n):
        v = self._ctlmv[:n]
        if n:
            await self._fill(v)
        if op == OP_PING:
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
        while await self._r.readinto(self._rxmv):
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
