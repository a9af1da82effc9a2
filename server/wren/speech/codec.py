"""Audio codecs for the device link: Opus (libopus via opuslib_next) and raw PCM, with one interface.

Every decoder returns int16 little-endian mono PCM; every encoder takes exactly one frame of it. The frame
size is always derived from `sample_rate` and `frame_ms` (60 ms at 24 kHz is 1440 samples, not 960), because
devices announce both in their hello.

Objects are not thread-safe: one codec per stream, used by one thread at a time. Construction costs about
0.1 ms, so the session makes a fresh encoder per turn (a clean Opus state per reply).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import opuslib_next
import opuslib_next.api.decoder


def _gil_holding(function: Any) -> Any:
    """The same libopus function, called without releasing the GIL (`ctypes.PyDLL`). A 60 ms packet decodes
    in ≈30-40 µs. The uplink decodes on the event loop (wren.pipeline.batched_executor), and a released GIL
    is one that Moonshine's or piper's threads may take, so every decode could cost the loop a wait for
    them; with 200 streaming devices the slowest loop rounds went from 153 to 74 ms (docs/performance.md,
    round 10)."""
    held = getattr(ctypes.PyDLL(opuslib_next.api.libopus._name), function.__name__)
    held.argtypes, held.restype = function.argtypes, function.restype
    return held


_libopus_decode = _gil_holding(opuslib_next.api.decoder.libopus_decode)  # opus_decode()

VALID_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
# Durations libopus encodes in one call (80-120 ms since libopus 1.2); 2.5 and 5 ms exist but no device
# uses them and they are not whole milliseconds.
VALID_OPUS_FRAME_MS = (10, 20, 40, 60, 80, 100, 120)
# Longest packet a decoder may produce: 120 ms is the Opus maximum, whatever frame_ms the device announced.
_MAX_PACKET_MS = 120


class CodecError(ValueError):
    """Audio that cannot be decoded or encoded; the caller drops the frame and carries on."""


class AudioDecoder(Protocol):
    sample_rate: int
    frame_ms: int

    def decode(self, packet: bytes) -> bytes: ...


class AudioEncoder(Protocol):
    sample_rate: int
    frame_ms: int
    frame_bytes: int

    def encode(self, pcm_frame: bytes) -> bytes: ...


def frame_samples(sample_rate: int, frame_ms: int) -> int:
    """Samples per channel in one frame of `frame_ms` at `sample_rate`."""
    samples, rest = divmod(sample_rate * frame_ms, 1000)
    if rest or samples <= 0:
        raise CodecError(f"{frame_ms} ms is not a whole number of samples at {sample_rate} Hz")
    return samples


def _check_opus_params(sample_rate: int, channels: int, frame_ms: int) -> None:
    if sample_rate not in VALID_OPUS_RATES:
        raise CodecError(f"Opus does not support {sample_rate} Hz (use one of {VALID_OPUS_RATES})")
    if channels not in (1, 2):
        raise CodecError(f"Opus supports 1 or 2 channels, not {channels}")
    if frame_ms not in VALID_OPUS_FRAME_MS:
        raise CodecError(f"unsupported Opus frame duration {frame_ms} ms (use one of {VALID_OPUS_FRAME_MS})")


def _to_mono(pcm: bytes, channels: int) -> bytes:
    if channels == 1:
        return pcm
    samples = np.frombuffer(pcm, dtype="<i2").reshape(-1, channels)
    return samples.mean(axis=1).astype("<i2").tobytes()


class OpusDecoder:
    """Decodes one device's uplink Opus packets to int16 mono PCM."""

    def __init__(self, sample_rate: int, channels: int = 1, frame_ms: int = 60) -> None:
        _check_opus_params(sample_rate, channels, frame_ms)
        self.sample_rate = sample_rate
        self.channels = channels
        self.frame_ms = frame_ms
        self.frame_samples = frame_samples(sample_rate, frame_ms)
        # Room for the longest legal packet: a device may send 120 ms even when it announced 60.
        self._max_samples = frame_samples(sample_rate, _MAX_PACKET_MS)
        self._decoder = opuslib_next.Decoder(sample_rate, channels)
        # libopus writes into this buffer, reused for every packet. (opuslib_next's own decode() turns the
        # output into a Python list of ints and back to bytes: that was most of the uplink decode cost.)
        self._pcm = (ctypes.c_int16 * (self._max_samples * channels))()
        self._pcm_pointer = ctypes.cast(self._pcm, opuslib_next.api.c_int16_pointer)
        self._pcm_bytes = memoryview(self._pcm).cast("B")  # slicing a view copies once (string_at: 5× slower)

    def decode(self, packet: bytes) -> bytes:
        """PCM for one packet. An empty packet is concealed as one lost frame (packet loss concealment);
        tiny DTX packets decode to comfort silence; a packet libopus rejects raises CodecError."""
        # Empty = lost packet: libopus conceals exactly the requested duration, so ask for one frame.
        frame = self._max_samples if packet else self.frame_samples
        data = bytes(packet)
        samples = _libopus_decode(self._decoder.decoder_state, data, len(data), self._pcm_pointer, frame, 0)
        if samples < 0:
            error = opuslib_next.OpusError(samples)
            raise CodecError(f"corrupt Opus packet ({len(packet)} bytes): {error}") from None
        pcm = self._pcm_bytes[: samples * self.channels * 2].tobytes()
        return pcm if self.channels == 1 else _to_mono(pcm, self.channels)

    def reset(self) -> None:
        self._decoder.reset_state()


class OpusEncoder:
    """Encodes int16 mono PCM frames of exactly `frame_ms` to Opus packets.

    Defaults measured on the 2-core dev box (tools/bench/speech_components.py): AUDIO application, no
    signal hint, complexity 5 → libopus picks CELT and spends ≈0.16 ms per 60 ms frame at 24 kHz. The
    voice hint (SILK/hybrid) costs ≈0.65 ms and complexity 10 ≈1.0 ms, and neither changed pocketsphinx's
    word errors on piper speech after the round trip (7, 8, 8 of 82 words; 7 without any codec).
    24 kbps matches the reference server; libopus would pick 48 kbps at 24 kHz.
    """

    def __init__(
        self,
        sample_rate: int = 24000,
        frame_ms: int = 60,
        bitrate: int = 24000,
        *,
        channels: int = 1,
        complexity: int = 5,
        application: str = "audio",
    ) -> None:
        _check_opus_params(sample_rate, channels, frame_ms)
        if application not in ("audio", "voip"):
            raise CodecError(f"unknown Opus application {application!r} (audio or voip)")
        if not 6000 <= bitrate <= 510000:
            raise CodecError(f"Opus bitrate {bitrate} out of range 6000..510000")
        self.sample_rate = sample_rate
        self.channels = channels
        self.frame_ms = frame_ms
        self.frame_samples = frame_samples(sample_rate, frame_ms)
        self.frame_bytes = self.frame_samples * 2 * channels
        app = opuslib_next.APPLICATION_AUDIO if application == "audio" else opuslib_next.APPLICATION_VOIP
        self._encoder = opuslib_next.Encoder(sample_rate, channels, app)
        self._encoder.bitrate = bitrate
        self._encoder.complexity = complexity

    def encode(self, pcm_frame: bytes) -> bytes:
        """One Opus packet for exactly one frame of PCM (`frame_bytes` long)."""
        if len(pcm_frame) != self.frame_bytes:
            raise CodecError(
                f"Opus encoder needs exactly {self.frame_bytes} bytes ({self.frame_ms} ms at "
                f"{self.sample_rate} Hz), got {len(pcm_frame)}"
            )
        try:
            return bytes(self._encoder.encode(bytes(pcm_frame), self.frame_samples))
        except opuslib_next.OpusError as exc:
            raise CodecError(f"Opus encode failed: {exc}") from None


class PcmDecoder:
    """'Decodes' raw int16 LE PCM (devices without Opus, e.g. the MicroPython host simulation)."""

    def __init__(self, sample_rate: int, channels: int = 1, frame_ms: int = 60) -> None:
        if channels not in (1, 2):
            raise CodecError(f"PCM supports 1 or 2 channels, not {channels}")
        self.sample_rate = sample_rate
        self.channels = channels
        self.frame_ms = frame_ms
        self.frame_samples = frame_samples(sample_rate, frame_ms)

    def decode(self, packet: bytes) -> bytes:
        if len(packet) % (2 * self.channels):
            raise CodecError(f"PCM packet of {len(packet)} bytes is not whole int16 samples")
        return _to_mono(bytes(packet), self.channels)

    def reset(self) -> None:
        pass


class PcmEncoder:
    """Passes int16 mono PCM frames through unchanged, with the same frame discipline as OpusEncoder."""

    def __init__(
        self, sample_rate: int = 24000, frame_ms: int = 60, bitrate: int = 0, *, channels: int = 1
    ) -> None:
        if channels != 1:
            raise CodecError("the PCM downlink is mono")
        self.sample_rate = sample_rate
        self.channels = 1
        self.frame_ms = frame_ms
        self.frame_samples = frame_samples(sample_rate, frame_ms)
        self.frame_bytes = self.frame_samples * 2

    def encode(self, pcm_frame: bytes) -> bytes:
        if len(pcm_frame) != self.frame_bytes:
            raise CodecError(f"PCM encoder needs exactly {self.frame_bytes} bytes, got {len(pcm_frame)}")
        return bytes(pcm_frame)


def make_decoder(
    fmt: str, sample_rate: int, channels: int = 1, frame_ms: int = 60
) -> OpusDecoder | PcmDecoder:
    """The decoder for a device's announced uplink `audio_params` (format opus or pcm)."""
    fmt = (fmt or "").lower()
    if fmt == "opus":
        return OpusDecoder(sample_rate, channels, frame_ms)
    if fmt == "pcm":
        return PcmDecoder(sample_rate, channels, frame_ms)
    raise CodecError(f"unsupported audio format {fmt!r} (opus or pcm)")


def make_encoder(
    fmt: str, sample_rate: int = 24000, frame_ms: int = 60, bitrate: int = 24000, **opus_options: object
) -> OpusEncoder | PcmEncoder:
    """The downlink encoder for `fmt` (opus or pcm); `opus_options` go to OpusEncoder (complexity, ...)."""
    fmt = (fmt or "").lower()
    if fmt == "opus":
        return OpusEncoder(sample_rate, frame_ms, bitrate, **opus_options)  # type: ignore[arg-type]
    if fmt == "pcm":
        return PcmEncoder(sample_rate, frame_ms)
    raise CodecError(f"unsupported audio format {fmt!r} (opus or pcm)")


class FrameChunker:
    """Cuts a stream of PCM of arbitrary lengths into exact frames; `flush` pads the tail with silence."""

    def __init__(self, frame_bytes: int) -> None:
        self.frame_bytes = frame_bytes
        self._buffer = bytearray()  # less than one frame between calls: feed() takes every whole frame

    def feed(self, pcm: bytes) -> list[bytes]:
        self._buffer += pcm
        count = len(self._buffer) // self.frame_bytes
        frames = [
            bytes(self._buffer[i * self.frame_bytes : (i + 1) * self.frame_bytes]) for i in range(count)
        ]
        del self._buffer[: count * self.frame_bytes]
        return frames

    def flush(self) -> list[bytes]:
        if not self._buffer:
            return []
        frame = bytes(self._buffer) + bytes(self.frame_bytes - len(self._buffer))
        self._buffer.clear()
        return [frame]

    @property
    def pending_bytes(self) -> int:
        return len(self._buffer)


def encode_stream(encoder: AudioEncoder, pcm: bytes | Iterator[bytes]) -> Iterator[bytes]:
    """Packets for PCM of any length (one buffer or an iterator of chunks); the last frame is padded with
    silence so nothing is cut off."""
    chunker = FrameChunker(encoder.frame_bytes)
    chunks = [pcm] if isinstance(pcm, bytes | bytearray | memoryview) else pcm
    for chunk in chunks:
        for frame in chunker.feed(bytes(chunk)):
            yield encoder.encode(frame)
    for frame in chunker.flush():
        yield encoder.encode(frame)
