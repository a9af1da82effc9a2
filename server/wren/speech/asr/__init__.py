"""Streaming speech recognition: `load_asr(config) -> AsrEngine`.

Usage per utterance (all calls blocking CPU work; the server runs them in its executor):

    stream = engine.open_stream(speaker=device_id)
                                      # a warm recogniser from the pool; `speaker` (optional) lets it start
                                      # from that device's channel adaptation (pocketsphinx CMN)
    stream.accept(pcm16k)             # as audio arrives; decoding happens here, while the user speaks
    stream.pause() / stream.resume()  # optional: the VAD heard a pause / speech again (moonshine decodes
                                      # speculatively at a pause)
    stream.partial()                  # best guess so far
    text = stream.finish()            # end of utterance: final lowercase words, noise tokens removed
    stream.close()                    # recogniser back to the pool (also after an abandoned utterance)

Thread-safety: the engine (its pool) is thread-safe; one AsrStream must be used by one thread at a time
(consecutive executor jobs are fine, concurrent ones are not).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol

from wren.config import AsrConfig
from wren.speech.asr.errors import AsrError

log = logging.getLogger(__name__)


class AsrStream(Protocol):
    def accept(self, pcm: bytes) -> None: ...

    def partial(self) -> str: ...

    # Optional (engines that decode whole utterances, e.g. moonshine): the session's VAD heard a pause /
    # speech again. Callers check with getattr; streaming engines do not need them.
    # def pause(self) -> None: ...
    # def resume(self) -> None: ...

    def finish(self) -> str: ...

    def close(self) -> None: ...


class AsrEngine(Protocol):
    name: str
    sample_rate: int

    def open_stream(self, speaker: str | None = None) -> AsrStream: ...


ENGINES = ("moonshine", "pocketsphinx", "vosk")


def close_asr(engine: object) -> None:
    """Release what an engine holds outside this process (worker processes); in-process engines: nothing."""
    close = getattr(engine, "close", None)
    if callable(close):
        close()


def load_asr(config: AsrConfig) -> AsrEngine:
    """The configured engine. moonshine: one shared model in this process (`wren.speech.asr.moonshine`);
    pocketsphinx/vosk: with `config.workers > 0` in that many worker processes
    (`wren.speech.asr.process_engine`), with 0 in this process."""
    engine = config.engine.lower()
    if engine not in ENGINES:
        raise AsrError(f"unknown ASR engine {config.engine!r} ({', '.join(ENGINES)})")
    if engine == "moonshine":
        from wren.speech.asr.moonshine import MoonshineNotInstalled, load_moonshine

        try:
            return load_moonshine(config)
        except MoonshineNotInstalled as exc:
            # The default engine on a box where pip could not install its x86_64-only wheel (an ARM
            # Raspberry Pi): keep working with the bundled pocketsphinx, and say how to get Moonshine.
            log.warning("asr: %s; falling back to pocketsphinx", exc)
            config = dataclasses.replace(config, engine="pocketsphinx", model_path="")
            return load_asr(config)
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
    raise AsrError(f"unknown ASR engine {config.engine!r} ({', '.join(ENGINES)})")


__all__ = ["AsrEngine", "AsrError", "AsrStream", "close_asr", "load_asr"]
