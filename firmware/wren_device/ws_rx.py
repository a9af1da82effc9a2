# The receiving half of wren_device.ws.WebSocket: a non-blocking frame parser (pump) over the socket, so a
# receive loop can take every message that has arrived without a coroutine call or a view per message
# (Opus packets vary in length): the payload is read into one receive buffer with readinto(buf, n), and
# a continuation at an offset goes through a small scratch buffer and a viper copy. Allocation-free but for
# control frames, errors and messages over 64 KB.
import asyncio
import struct

from micropython import const

from shared_protocol.constants import CLOSE_PROTOCOL_ERROR, CLOSE_TOO_BIG
from wren_device import dsp

NEED = const(-1)  # pump(): no whole message yet
ERROR = const(-2)  # pump(): a protocol error or a lost connection; control() handles it
_HEAD = const(0)
_EXT = const(1)
_PAYLOAD = const(2)
_CTL = const(3)
_OP_CONT = const(0)
_OP_TEXT = const(1)
_OP_BINARY = const(2)


class Receiver:
    def _rx_init(self, max_message):
        self.max_message = max_message
        self._rx = bytearray(max_message)
        self.rx = self._rx  # a data message is rx[:rx_len]
        self.rx_len = 0
        self._rh = bytearray(8)
        self._ctl = bytearray(125)
        self.ctl_len = 0
        self._tmp = bytearray(256)
        self._err_code = 0
        self._err_reason = ""
        self._rx_reset()

    def _rx_reset(self):
        self._st = _HEAD
        self._need = 2
        self._got = 0
        self._op = 0
        self._fin = 0
        self._msg_op = -1
        self._total = 0

    def _read(self, buf, at, n):
        # -> bytes read into buf[at:at + n] now (0: none yet). EOF or a socket error -> OSError.
        s = self._r.s
        if at == 0:
            k = s.readinto(buf, n)
        else:
            k = s.readinto(self._tmp, n if n < 256 else 256)
            if k:
                dsp.copy_bytes(buf, at, self._tmp, 0, k)
        if k is None:
            return 0
        if k == 0:
            raise OSError("connection lost")
        return k

    def _error(self, code, reason):
        self._err_code = code
        self._err_reason = reason
        return ERROR

    def pump(self):
        # Reads what the socket has, never waits. -> the opcode of a whole data message (in rx[:rx_len]),
        # a control opcode (8 close, 9 ping, 10 pong; payload in _ctl[:ctl_len]), NEED or ERROR.
        if self._r is None:
            return self._error(1006, "not open")
        rh = self._rh
        while True:
            st = self._st
            buf = self._rx if st == _PAYLOAD else self._ctl if st == _CTL else rh
            base = self._total if st == _PAYLOAD else 0
            need = self._need
            try:
                while self._got < need:
                    k = self._read(buf, base + self._got, need - self._got)
                    if not k:
                        return NEED
                    self._got += k
            except OSError as e:
                self.open = False
                return self._error(1006, "receive failed: %s" % e)
            self._got = 0
            if st == _HEAD:
                b0 = rh[0]
                b1 = rh[1]
                self._op = b0 & 0x0F
                self._fin = b0 & 0x80
                n = b1 & 0x7F
                if b0 & 0x70:
                    return self._error(CLOSE_PROTOCOL_ERROR, "reserved bits set")
                if b1 & 0x80:
                    return self._error(CLOSE_PROTOCOL_ERROR, "masked frame from server")
                if n >= 126:
                    self._st = _EXT
                    self._need = 2 if n == 126 else 8
                    continue
            elif st == _EXT:
                if need == 2:
                    n = (rh[0] << 8) | rh[1]
                else:
                    hi, n = struct.unpack_from(">II", rh)  # > 64 KB: allocates (never audio)
                    if hi:
                        n = self.max_message + 1
            elif st == _PAYLOAD:
                self._total += need
                self._st = _HEAD
                self._need = 2
                if self._fin:
                    self.rx_len = self._total
                    op = self._msg_op
                    self._msg_op = -1
                    self._total = 0
                    return op
                continue
            else:  # a control frame's payload is in
                self._st = _HEAD
                self._need = 2
                self.ctl_len = need
                return self._op
            r = self._frame(n)
            if r != NEED:
                return r

    def _frame(self, n):
        # A frame header with payload length n was read: what to read next -> NEED, or a result.
        op = self._op
        self._need = n
        if op >= 8:
            if n > 125 or not self._fin:
                return self._error(CLOSE_PROTOCOL_ERROR, "bad control frame")
            if n == 0:
                self._st = _HEAD
                self._need = 2
                self.ctl_len = 0
                return op
            self._st = _CTL
            return NEED
        if op == _OP_CONT:
            if self._msg_op < 0:
                return self._error(CLOSE_PROTOCOL_ERROR, "continuation without a start")
        elif op == _OP_TEXT or op == _OP_BINARY:
            if self._msg_op >= 0:
                return self._error(CLOSE_PROTOCOL_ERROR, "new message inside a fragmented one")
            self._msg_op = op
        else:
            return self._error(CLOSE_PROTOCOL_ERROR, "unknown opcode")
        if self._total + n > self.max_message:
            return self._error(CLOSE_TOO_BIG, "message too big")
        self._st = _PAYLOAD
        if n == 0:
            self._need = 0  # the loop finishes an empty frame at once
        return NEED

    def _wait_readable(self):
        # Wait for the socket (asyncio's IO queue: allocates; recv_op's waits, not the channel's loop).
        yield asyncio.core._io_queue.queue_read(self._r.s)

    async def recv_op(self):
        # -> opcode of one whole data message, now in rx[:rx_len]. Pings are answered, pongs ignored, a
        # close is echoed and raised as WsClosed. Size is checked on the declared length first.
        while True:
            op = self.pump()
            if op == NEED:
                await self._wait_readable()
            elif op == _OP_TEXT or op == _OP_BINARY:
                return op
            else:
                await self.control(op)

    async def recv(self):
        # -> (opcode, memoryview of the message): recv_op() with a view made for the caller.
        op = await self.recv_op()
        return op, memoryview(self._rx)[: self.rx_len]
