"""Audio in fixed windows, for the voice activity detectors (`wren.speech.vad`, `wren.speech.webrtc_vad`):
the buffer that cuts a stream's chunks into whole windows, and the room's noise floor from their energies."""

from __future__ import annotations

from collections import deque

SAMPLE_RATE = 16000
NOISE_BLOCK_WINDOWS = 16  # the noise floor is the quietest window of the last NOISE_BLOCKS blocks of 512 ms
NOISE_BLOCKS = 4  # 2 s: long enough to span a phrase (words have quiet gaps), short enough to follow a room


class NoiseFloor:
    """Minimum statistics of window energy: the quietest window of the last ≈2 s, in blocks of 512 ms.

    A minimum follows a steady room (fan, hum, hiss) from one block to the next, and speech barely moves it,
    because every phrase has quiet gaps between its words. O(1) per window; unknown until one block is full.
    """

    def __init__(self) -> None:
        # Bound NOISE_BLOCKS, policy: drop the oldest block's minimum (the room may have changed since).
        self._minima: deque[float] = deque(maxlen=NOISE_BLOCKS)
        self._of_blocks: float | None = None  # min(self._minima), kept: it is read for every frame
        self._block_min = float("inf")
        self._in_block = 0

    def add(self, *mean_squares: float) -> None:
        """One window's energy, or each of a call's windows in order."""
        for mean_square in mean_squares:
            if mean_square < self._block_min:
                self._block_min = mean_square
            self._in_block += 1
            if self._in_block == NOISE_BLOCK_WINDOWS:
                self._minima.append(self._block_min)
                self._of_blocks = min(self._minima)
                self._block_min, self._in_block = float("inf"), 0

    @property
    def mean_square(self) -> float | None:
        """The floor (mean square of float samples), or None while the first block fills."""
        of_blocks = self._of_blocks
        return None if of_blocks is None else min(of_blocks, self._block_min)


class WindowBuffer:
    """Accumulates PCM and yields whole windows; the remainder waits for the next call."""

    def __init__(self, window_bytes: int) -> None:
        self.window_bytes = window_bytes
        self._buffer = bytearray()  # less than one window between calls: windows() takes every whole one

    def windows(self, pcm: bytes) -> list[bytes]:
        block = self.whole_windows(pcm)
        size = self.window_bytes
        return [block[i : i + size] for i in range(0, len(block), size)]

    def whole_windows(self, pcm: bytes) -> bytes:
        """The whole windows the buffer holds with `pcm` added, as one block (a multiple of a window)."""
        if not self._buffer and len(pcm) % self.window_bytes == 0:
            return pcm  # nothing held and nothing left over: no copy at all
        self._buffer += pcm
        end = len(self._buffer) // self.window_bytes * self.window_bytes
        block = bytes(self._buffer[:end])
        del self._buffer[:end]
        return block

    def clear(self) -> None:
        self._buffer.clear()
