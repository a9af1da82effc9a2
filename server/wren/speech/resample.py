"""Streaming sample-rate conversion of int16 mono PCM (soxr), e.g. 24 kHz device audio → 16 kHz for ASR,
or piper's 22,050 Hz → the device's downlink rate.

The stream keeps filter state between calls, so chunk boundaries leave no clicks; `flush()` returns the
filter's delayed tail at the end of a stream. One Resampler per stream, used by one thread at a time.
"""

from __future__ import annotations

import numpy as np
import soxr


class Resampler:
    def __init__(self, src_rate: int, dst_rate: int, quality: str = "HQ") -> None:
        if src_rate <= 0 or dst_rate <= 0:
            raise ValueError(f"sample rates must be positive, got {src_rate} → {dst_rate}")
        self.src_rate = src_rate
        self.dst_rate = dst_rate
        self.passthrough = src_rate == dst_rate
        self._quality = quality
        self._stream = None if self.passthrough else self._new_stream()
        self._odd_byte = b""  # a chunk split inside a sample keeps its first byte for the next call

    def _new_stream(self) -> soxr.ResampleStream:
        # int16 in/out: soxr converts internally, no float round trip in Python.
        return soxr.ResampleStream(self.src_rate, self.dst_rate, 1, dtype="int16", quality=self._quality)

    def process(self, pcm: bytes) -> bytes:
        """Resampled PCM for the next chunk of the stream (may be shorter or empty while the filter fills)."""
        if self._odd_byte:
            pcm = self._odd_byte + bytes(pcm)
            self._odd_byte = b""
        if len(pcm) % 2:
            pcm, self._odd_byte = pcm[:-1], bytes(pcm[-1:])
        if self.passthrough or not pcm:
            return bytes(pcm)
        samples = np.frombuffer(pcm, dtype="<i2")
        return self._stream.resample_chunk(samples).astype("<i2", copy=False).tobytes()

    def flush(self) -> bytes:
        """The remaining output at the end of the stream; the resampler is then ready for a new stream."""
        self._odd_byte = b""
        if self.passthrough:
            return b""
        tail = self._stream.resample_chunk(np.zeros(0, dtype="<i2"), last=True)
        self._stream = self._new_stream()
        return tail.astype("<i2", copy=False).tobytes()


def resample_all(pcm: bytes, src_rate: int, dst_rate: int) -> bytes:
    """Convenience: resample one complete buffer."""
    resampler = Resampler(src_rate, dst_rate)
    return resampler.process(pcm) + resampler.flush()
