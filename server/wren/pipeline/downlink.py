"""Downlink audio for one reply: TTS PCM → the device's rate → exact frames → packets.

One renderer per turn, so every reply starts with a fresh Opus encoder (reference §9.3, xinnan #863)
and the encoder is never reset mid-sentence. Blocking; runs in the speak executor.
"""

from __future__ import annotations

from dataclasses import dataclass

from wren.speech.codec import FrameChunker, make_encoder
from wren.speech.resample import Resampler


@dataclass(frozen=True)
class DownlinkFormat:
    """What the server really encodes, exactly as announced in its hello."""

    format: str  # "opus" or "pcm"
    sample_rate: int
    frame_ms: int
    bitrate: int = 24000

    def audio_params(self) -> dict:
        return {
            "format": self.format,
            "sample_rate": self.sample_rate,
            "channels": 1,
            "frame_duration": self.frame_ms,
        }


class DownlinkRenderer:
    def __init__(self, tts_rate: int, fmt: DownlinkFormat) -> None:
        self._resampler = Resampler(tts_rate, fmt.sample_rate)
        self._encoder = make_encoder(fmt.format, fmt.sample_rate, fmt.frame_ms, fmt.bitrate)
        self._chunker = FrameChunker(self._encoder.frame_bytes)

    def render(self, pcm: bytes) -> list[bytes]:
        """Packets for the next piece of TTS audio (a partial frame waits for more)."""
        return [self._encoder.encode(frame) for frame in self._chunker.feed(self._resampler.process(pcm))]

    def flush(self) -> list[bytes]:
        """The tail of the reply, the last frame padded with silence."""
        frames = self._chunker.feed(self._resampler.flush()) + self._chunker.flush()
        return [self._encoder.encode(frame) for frame in frames]
