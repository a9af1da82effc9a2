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

    def process_mic(self):
        # raw holds one full frame of mic slots -> n: the frame to send is self.send[:n] (sent as
        # (buffer, length): no view per length, Opus packets vary; a tuple would allocate too).
        dsp.i32_to_i16(self.raw, SAMPLES)
        n = self.codec.encode(self.raw, SAMPLES * 2, self.send, self.hs)
        framing.pack_header_into(self.send, self.version, n)
        return self.hs + n


# Opus is buffered as packets (what the server sends ahead), decoded one at a time as the speaker needs
# it: 6 bytes per ms of ring holds 48 kbit/s plus the 2-byte length of each packet (the Wren server sends
# 24 kbit/s), against 32 (16 kHz) or 48 (24 kHz) bytes per ms of PCM.
_OPUS_BYTES_PER_MS = const(6)
_MAX_PACKET = const(1500)
_MAX_FRAME_MS = const(120)  # the longest Opus frame: the decoded-PCM ring holds one plus a chunk


class Downlink:
    # received frame -> [packet ring -> codec] -> PCM ring -> fixed 20 ms chunks (volume gain) -> speaker.
    # The rings are bounded: audio beyond them is dropped, like the official firmware's packet queue. They
    # are sized from how far ahead the server sends (docs/server.md "Pacing": at most ~1 s, 360 ms by
    # default) and allocated here, at boot, for the highest rate expected (a large block on a fragmented
    # heap may no longer be found when the server's hello comes).
    def __init__(self, codec, version, max_rate=16000, ring_ms=1000):
        import micropython

        self.codec = codec
        self.version = version
        self.hs = framing.header_size(version)
        self.packets = codec.format != "pcm"
        if self.packets:
            self.ring = micropython.RingIO(ring_ms * _OPUS_BYTES_PER_MS + 1)
            self._pcm_cap = max_rate * 2 * (_MAX_FRAME_MS + _CHUNK_MS) // 1000
            self.pcm = micropython.RingIO(self._pcm_cap + 1)
            self._pkt = bytearray(_MAX_PACKET)
            self._len = bytearray(2)
            codec.reserve(max_rate, 60)  # the decoded frame (xiaozhi's 60 ms), made now
        else:
            self._pcm_cap = max_rate * 2 * ring_ms // 1000
            self.ring = self.pcm = micropython.RingIO(self._pcm_cap + 1)
        self._cap = ring_ms * (_OPUS_BYTES_PER_MS if self.packets else max_rate * 2 // 1000)
        self._chunk_buf = bytearray(max_rate * 2 * _CHUNK_MS // 1000)
        self._chunk_mv = memoryview(self._chunk_buf)
        self.max_rate = max_rate
        self.rate = 0
        self.chunk = None
        self.gain = 4096
        self.dropped = 0
        self.received = 0
        self.bad = 0

    def set_version(self, version):
        # The binary protocol version, known once OTA has answered (the paths are made before it).
        self.version = version
        self.hs = framing.header_size(version)

    def room(self):
        # Bytes the PCM ring can still take (wren_device.pairing writes decoded PCM straight onto it).
        return self._pcm_cap - self.pcm.any()

    def configure(self, rate, frame_ms):
        # -> True when the speaker can follow this rate with the buffers made at boot.
        if rate > self.max_rate or (self.packets and frame_ms > _MAX_FRAME_MS):
            return False
        if rate != self.rate:
            self.rate = rate
            self.codec.reset_decoder(rate, frame_ms)
            n = rate * 2 * _CHUNK_MS // 1000
            self.chunk = self._chunk_buf if n == len(self._chunk_buf) else self._chunk_mv[:n]
        return True

    def set_volume(self, volume):
        self.gain = dsp.volume_to_gain(volume)

    def feed(self, buf, total):
        # One binary message, buf[:total]; the payload follows the v2/v3 header (v1: none). Allocates nothing.
        hs = self.hs
        n = total - hs
        if hs == 16:
            declared = (buf[12] << 24) | (buf[13] << 16) | (buf[14] << 8) | buf[15]
        elif hs == 4:
            declared = (buf[2] << 8) | buf[3]
        else:
            declared = n
        self.received += 1
        if n < 0 or declared != n:
            self.bad += 1  # a truncated frame or trailing garbage (shared_protocol.audio's rule)
            return
        ring = self.ring
        if self.packets:
            if n > _MAX_PACKET or self._cap - ring.any() < n + 2:
                self.dropped += 1
                return
            self._len[0] = n >> 8
            self._len[1] = n & 0xFF
            ring.write(self._len)
        elif self._cap - ring.any() < n:
            self.dropped += 1
            return
        ring.write(buf, hs, n)

    def _decode_one(self):
        # One packet from the ring -> decoded PCM onto the PCM ring.
        self.ring.readinto(self._len)
        n = (self._len[0] << 8) | self._len[1]
        self.ring.readinto(self._pkt, n)
        try:
            nbytes = self.codec.decode(self._pkt, n)
        except (ValueError, OSError):  # a corrupt packet: skipped (its exception is the only allocation)
            self.bad += 1
            return
        self.pcm.write(self.codec.out, 0, nbytes)

    def pending(self):
        return self.ring.any() or self.pcm.any()

    def next_chunk(self):
        # Fills the fixed chunk (zero-padding the tail of the last one), volume applied -> bytes of audio.
        c = self.chunk
        need = len(c)
        if self.packets:
            while self.pcm.any() < need and self.ring.any() >= 2:
                self._decode_one()
        n = self.pcm.readinto(c)
        dsp.scale_i16(c, n >> 1, self.gain)
        if n < need:
            dsp.fill_zero(self._chunk_buf, n, need)
        return n

    def flush(self):
        while self.ring.readinto(self._chunk_buf):
            pass
        while self.pcm.readinto(self._chunk_buf):
            pass
