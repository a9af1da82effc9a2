# Audio codec: an `opus` C module when the firmware has one (docs/firmware.md explains how to build it),
# otherwise PCM 16-bit mono, announced as audio_params.format "pcm" in the hello (the server honours it).
from wren_device import dsp


class PcmCodec:
    format = "pcm"
    out = None

    def max_packet(self, rate, frame_ms):
        return rate * frame_ms // 500

    def encode(self, pcm, nbytes, out, out_off):
        dsp.copy_bytes(out, out_off, pcm, 0, nbytes)
        return nbytes

    def decode(self, packet, nbytes):
        # -> bytes of int16 PCM now in self.out (no tuple: returning one would allocate per frame).
        # PCM is its own decoding: the packet buffer itself is the output.
        self.out = packet
        return nbytes

    def reset_decoder(self, rate, frame_ms):
        pass


class OpusCodec:
    # Expects the binding of notes §2.2: Encoder/Decoder writing into caller buffers, no per-frame
    # allocation: enc.encode(pcm_mv, out_mv) -> n, dec.decode(packet_mv, pcm_out) -> nsamples.
    format = "opus"

    def __init__(self, opus):
        self._opus = opus
        self._enc = opus.Encoder(sample_rate=16000, channels=1, duration_ms=60, complexity=0, dtx=True)
        self._dec = None
        self._pcm = None
        self._rate = 0

    def max_packet(self, rate, frame_ms):
        return 1500

    def encode(self, pcm, nbytes, out, out_off):
        return self._enc.encode(memoryview(pcm)[:nbytes], memoryview(out)[out_off:])

    def reset_decoder(self, rate, frame_ms):
        if rate != self._rate or self._dec is None:
            self._dec = self._opus.Decoder(sample_rate=rate, channels=1)
            self._pcm = bytearray(rate * frame_ms // 500)
            self._rate = rate

    def decode(self, packet, nbytes):
        n = self._dec.decode(packet, self._pcm)
        self.out = self._pcm
        return 2 * n


def make_codec(prefer_opus=True):
    if prefer_opus:
        try:
            import opus

            return OpusCodec(opus)
        except ImportError:
            pass
    return PcmCodec()
