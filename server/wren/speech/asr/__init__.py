"""Streaming speech recognition: `load_asr(config) -> AsrEngine`.

Usage per utterance (all calls blocking CPU work; the server runs them in its executor):

    stream = engine.open_stream(speaker=device_id)
                                      # a warm recogniser from the pool; `speaker` (optional) lets it start
                                      # from that device's channel adaptation (pocketsphinx CMN)
    stream.accept(pcm16k)             # as audio arrives; decoding happens here, while the user speaks
    stream.partial()                  # best guess so far
    text = stream.finish()            # end of utterance: final lowercase words, noise tokens removed
    stream.close()                    # recogniser back to the pool (also after an abandoned utterance)

Thread-safety: the engine (its pool) is thread-safe; one AsrStream must be used by one thread at a time
(consecutive executor jobs are fine, concurrent ones are not).
"""

from __future__ import annotations

from typing import Protocol

from wren.config import AsrConfig


class AsrError(RuntimeError):
    """A recogniser that cannot be loaded or used."""


class AsrStream(Protocol):
    def accept(self, pcm: bytes) -> None: ...

    def partial(self) -> str: ...

    def finish(self) -> str: ...

    def close(self) -> None: ...


class AsrEngine(Protocol):
    name: str
    sample_rate: int

    def open_stream(self, speaker: str | None = None) -> AsrStream: ...


def close_asr(engine: object) -> None:
    """Release what an engine holds outside this process (worker processes); in-process engines: nothing."""
    close = getattr(engine, "close", None)
    if callable(close):
        close()


def load_asr(config: AsrConfig) -> AsrEngine:
    """The configured engine; with `config.workers > 0` it runs in that many worker processes
    (`wren.speech.asr.process_engine`), with 0 in this process."""
    engine = config.engine.lower()
    if engine not in ("pocketsphinx", "vosk"):
        raise AsrError(f"unknown ASR engine {config.engine!r} (pocketsphinx or vosk)")
    if config.workers > 0:
        from wren.speech.asr.process_engine import ProcessAsrEngine

        return ProcessAsrEngine(config, workers=config.workers)
    if engine == "pocketsphinx":
        from wren.speech.asr.pocketsphinx_engine import PocketsphinxEngine

        return PocketsphinxEngine(
            model_path=config.model_path, pool_size=config.pool_size, max_idle=config.max_idle_per_worker
        )
    if engine == "vosk":
        from wren.speech.asr.vosk_engine import VoskEngine

        if not config.model_path:
            raise AsrError("asr.engine = vosk needs asr.model_path (a vosk model folder)")
        return VoskEngine(
            model_path=config.model_path, pool_size=config.pool_size, max_idle=config.max_idle_per_worker
        )
    raise AsrError(f"unknown ASR engine {config.engine!r} (pocketsphinx or vosk)")


__all__ = ["AsrEngine", "AsrError", "AsrStream", "close_asr", "load_asr"]
