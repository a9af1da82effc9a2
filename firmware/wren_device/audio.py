# The two audio paths. Every buffer and memoryview is made once here; the per-frame steps (process_mic,
# feed, next_chunk) allocate nothing for v1 framing (tests/firmware prove it under heap_lock).
from micropython import const

from shared_protocol import audio as framing
from wren_device import dsp

MIC_RATE = const(16000)
FRAME_MS = const(60)
SAMPLES = const(960)  # 60 ms at 16 kHz
_CHUNK_MS = const(20)


class Uplink:
    # mic (32-bit I2S slots) -> int16 -> codec -> [xiaozhi v1/v2/v3 header + payload] send buffer
    def __init__(self, codec, version):
        self.codec = codec
        self.version = version
        self.raw = bytearray(SAMPLES * 4)
        self.raw_mv = memoryview(self.raw)
        self.hs = framing.header_size(version)
        self.send = bytearray(self.hs + codec.max_packet(MIC_RATE, FRAME_MS))
        self.send_mv = memoryview(self.send)
        self._views = {}

    def process_mic(self):
        # raw holds one full frame of mic slots -> length of the frame now in self.frame (a buffer or
        # view of exactly that length; returning a tuple instead would allocate every frame).
        dsp.i32_to_i16(self.raw, SAMPLES)
        n = self.codec.encode(self.raw, SAMPLES * 2, self.send, self.hs)
        framing.pack_header_into(self.send, self.version, n)
        total = self.hs + n
        self.frame = self.send if total == len(self.send) else self._view(total)
        return total

    def _view(self, n):
        v = self._views.get(n)
        if v is None:
            v = self._views[n] = self.send_mv[:n]
        return v


class Downlink:
    # received frame -> codec -> volume gain -> jitter ring -> fixed 20 ms chunks for the speaker.
    # The ring is bounded: audio beyond it is dropped, like the official firmware's 40-packet queue.
    # Everything is allocated here, at boot, for the highest rate expected (the server's hello comes later
    # and a 48 KB allocation on a fragmented heap may no longer succeed then).
    def __init__(self, codec, version, max_rate=16000, ring_ms=1200):
        import micropython

        self.codec = codec
        self.version = version
        self.hs = framing.header_size(version)
        self.ring = micropython.RingIO(max_rate * 2 * ring_ms // 1000 + 1)
        self._chunk_buf = bytearray(max_rate * 2 * _CHUNK_MS // 1000)
        self._chunk_mv = memoryview(self._chunk_buf)
        self.max_rate = max_rate
        self.rate = 0
        self.chunk = None
        self.gain = 4096
        self.dropped = 0
        self.received = 0

    def configure(self, rate, frame_ms):
        # -> True when the speaker can follow this rate with the buffers made at boot.
        if rate > self.max_rate:
            return False
        if rate != self.rate:
            self.rate = rate
            self.codec.reset_decoder(rate, frame_ms)
            n = rate * 2 * _CHUNK_MS // 1000
            self.chunk = self._chunk_buf if n == len(self._chunk_buf) else self._chunk_mv[:n]
        return True

    def set_volume(self, volume):
        self.gain = dsp.volume_to_gain(volume)

    def feed(self, frame):
        # One binary message (memoryview). Payload location per framing version; v1 has no header.
        n = len(frame)
        if self.hs:
            off, n, _ts = framing.parse_header(self.version, frame)
            frame = frame[off : off + n]
        nbytes = self.codec.decode(frame, n)
        pcm = self.codec.out
        dsp.scale_i16(pcm, nbytes >> 1, self.gain)
        wrote = self.ring.write(pcm if nbytes == len(pcm) else memoryview(pcm)[:nbytes])
        self.received += 1
        if wrote < nbytes:
            self.dropped += 1

    def pending(self):
        return self.ring.any()

    def next_chunk(self):
        # Fills the fixed chunk (zero-padding the tail of the last one) -> bytes of real audio in it.
        n = self.ring.readinto(self.chunk)
        if n < len(self.chunk):
            dsp.fill_zero(self._chunk_buf, n, len(self.chunk))
        return n

    def flush(self):
        while self.ring.readinto(self._chunk_buf):
            pass
