# Audio codec: the `opus` C module when the firmware has one (firmware/modules/opus, in the Wren build:
# docs/firmware.md, "Two builds"),
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

    def reserve(self, max_rate, frame_ms):
        pass


class OpusCodec:
    # firmware/modules/opus: Encoder/Decoder writing into caller buffers, no per-frame allocation:
    # enc.encode(pcm, out) -> n (one frame from the start of pcm), dec.decode(packet, pcm_out, n) -> nsamples.
    format = "opus"

    def __init__(self, opus):
        self._opus = opus
        self._enc = opus.Encoder(sample_rate=16000, channels=1, duration_ms=60, complexity=0, dtx=True)
        self._dec = None
        self._pcm = None
        self.out = None  # set now: a first store from decode() would grow the instance dict (allocate)
        self._rate = 0
        # The send buffer and payload offset last seen, and the view of it from there (made once).
        self._out = self._out_off = self._out_mv = None

    def max_packet(self, rate, frame_ms):
        return 1500

    def encode(self, pcm, nbytes, out, out_off):
        # pcm holds the frame's nbytes (one 60 ms frame) at its start; a view per call would allocate.
        if out is not self._out or out_off != self._out_off:
            self._out, self._out_off = out, out_off
            self._out_mv = memoryview(out)[out_off:]
        return self._enc.encode(pcm, self._out_mv)

    def reserve(self, max_rate, frame_ms):
        # At boot: the decoded-frame buffer for the highest rate (not at the hello, on a fragmented heap).
        self._pcm = bytearray(max_rate * frame_ms // 500)

    def reset_decoder(self, rate, frame_ms):
        if rate != self._rate or self._dec is None:
            if self._dec is not None:
                self._dec.close()  # its state lives outside the GC heap: free it now, not at the next GC
            self._dec = self._opus.Decoder(sample_rate=rate, channels=1)
            if self._pcm is None or len(self._pcm) < rate * frame_ms // 500:
                self._pcm = bytearray(rate * frame_ms // 500)  # a longer frame than reserved for
            self._rate = rate

    def decode(self, packet, nbytes):
        n = self._dec.decode(packet, self._pcm, nbytes)
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
