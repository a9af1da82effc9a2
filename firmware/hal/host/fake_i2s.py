# Simulated I2S peripherals for the host (notes §7.7): io.IOBase objects that asyncio streams can poll.
# ioctl 3 (MP_STREAM_POLL) answers readiness; every other request returns -1.
import io
import struct
import time

import micropython

_POLL = 3
_RD = 1
_WR = 4


@micropython.viper
def _i16_to_i32_shift12(src: ptr16, dst: ptr16, n: int):  # noqa: F821 (viper pointer types)
    # 16-bit WAV samples -> the 32-bit slot words an INMP441 produces, scaled so that the firmware's
    # >>12 conversion gives back the original sample. Low half first (little-endian words).
    i = 0
    while i < n:
        s = (src[i] ^ 0x8000) - 0x8000
        v = s << 12
        dst[2 * i] = v & 0xFFFF
        dst[2 * i + 1] = (v >> 16) & 0xFFFF
        i += 1


def read_wav(path):
    # -> (file positioned at the PCM data, sample_rate, data_bytes); 16-bit mono only.
    f = open(path, "rb")
    head = f.read(12)
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        raise ValueError("not a WAV file: " + path)
    rate = bits = channels = None
    while True:
        ch = f.read(8)
        if len(ch) < 8:
            raise ValueError("WAV without a data chunk: " + path)
        cid, size = ch[:4], struct.unpack("<I", ch[4:])[0]
        if cid == b"fmt ":
            fmt = f.read(size)
            channels, rate = struct.unpack_from("<HI", fmt, 2)
            bits = struct.unpack_from("<H", fmt, 14)[0]
        elif cid == b"data":
            if bits != 16 or channels != 1:
                raise ValueError("mic WAV must be 16-bit mono: " + path)
            return f, rate, size
        else:
            f.read(size + (size & 1))


class FakeMic(io.IOBase):
    # 16 kHz mono mic on a 32-bit slot, delivered in real time. The WAV advances only while the app
    # listens (set_active), like a person who speaks when the device is listening; otherwise, and after
    # the end of the file, it delivers silence.
    def __init__(self, wav_path=None, rate=16000):
        self.rate = rate
        self._f = None
        self._left = 0
        if wav_path:
            self._f, wav_rate, self._left = read_wav(wav_path)
            if wav_rate != rate:
                raise ValueError("mic WAV must be %d Hz, got %d" % (rate, wav_rate))
        self.active = False
        self.eof_ms = None  # ticks when the WAV ran out
        self._t0 = time.ticks_ms()  # the I2S clock runs from creation, as on the board
        self._delivered = 0
        self._tmp = bytearray(2048)

    def _available(self):
        return time.ticks_diff(time.ticks_ms(), self._t0) * self.rate // 1000 - self._delivered

    def readinto(self, buf, nbytes=-1):
        # buf[:nbytes] (default: all of it), as a stream's readinto(buf, max_len); None = nothing yet.
        room = len(buf) if nbytes < 0 else min(nbytes, len(buf))
        n = min(room // 4, self._available(), len(self._tmp) // 2)
        if n <= 0:
            return None
        nbytes = 2 * n
        got = 0
        if self.active and self._left > 0:
            got = min(self._f.readinto(self._tmp, nbytes) or 0, self._left)  # past the data chunk: zeroed
            self._left -= got
            if self._left <= 0 or not got:
                self._left = 0
                self.eof_ms = time.ticks_ms()
        for i in range(got, nbytes):
            self._tmp[i] = 0
        _i16_to_i32_shift12(self._tmp, buf, n)
        self._delivered += n
        return 4 * n

    def ioctl(self, req, arg):
        if req == _POLL:
            return _RD if (arg & _RD) and self._available() > 0 else 0
        return -1


class FakeSpeaker(io.IOBase):
    # An I2S amplifier with a bounded DMA buffer that empties in real time; what it plays goes to a WAV.
    def __init__(self, path, rate, buffer_ms=120):
        self.rate = rate
        self.buffer_ms = buffer_ms
        self._cap = rate * 2 * buffer_ms // 1000
        self._pending = 0
        self._t = time.ticks_ms()
        self.written = 0
        self._hdr = bytearray(44)
        self._f = open(path, "wb") if path else None
        if self._f:
            self._header(0)

    def _header(self, data_bytes):
        # Into one buffer made at start: rewritten at every drained point, so it must not allocate.
        h = self._hdr
        struct.pack_into("<4sI4s4sIHHIIHH4sI", h, 0, b"RIFF", 36 + data_bytes, b"WAVE", b"fmt ", 16, 1, 1,
                         self.rate, self.rate * 2, 2, 16, b"data", data_bytes)
        self._f.seek(0)
        self._f.write(h)
        self._f.seek(44 + data_bytes)

    def _room(self):
        now = time.ticks_ms()
        played = time.ticks_diff(now, self._t) * self.rate * 2 // 1000
        if played:
            self._t = now
            self._pending = max(0, self._pending - played)
        return self._cap - self._pending

    def write(self, buf, off=0, nbytes=-1):
        # buf[off:off + nbytes], as a stream's write(buf, off, max_len) -> bytes taken (no view made).
        avail = len(buf) - off if nbytes < 0 else nbytes
        n = min(avail, self._room())
        if n <= 0:
            return 0
        if self._f:
            self._f.write(buf, off, n)
        self._pending += n
        self.written += n
        return n

    def ioctl(self, req, arg):
        if req == _POLL:
            return _WR if (arg & _WR) and self._room() > 0 else 0
        return -1

    def flush_header(self):
        # Keep the WAV valid at every drained point, so an interrupted simulation still leaves a file.
        if self._f:
            self._header(self.written)
            self._f.flush()

    def close(self):
        if self._f:
            self.flush_header()
            self._f.close()
            self._f = None
