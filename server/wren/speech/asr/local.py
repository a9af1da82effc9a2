"""Loading an ASR engine in *this* process (`asr.workers` ignored).

Two callers: `load_asr` (with `workers = 0`) and every ASR worker process (`workers.child`), which must
load the real engine without importing the package `__init__` (that imports the worker machinery, and a
worker importing it back would be an import cycle).
"""

from __future__ import annotations

import dataclasses
import logging

from wren.config import AsrConfig
from wren.speech.asr.base import AsrEngine
from wren.speech.asr.errors import AsrError

log = logging.getLogger(__name__)

ENGINES = ("moonshine", "pocketsphinx", "vosk")


def engine_name(config: AsrConfig) -> str:
    """The configured engine's name, lowercase; AsrError for one Wren does not have."""
    engine = config.engine.lower()
    if engine not in ENGINES:
        raise AsrError(f"unknown ASR engine {config.engine!r} ({', '.join(ENGINES)})")
    return engine


def try_moonshine(config: AsrConfig, max_streams: int = 0) -> AsrEngine | None:
    """The moonshine engine, or None where its wheel is not installed (the caller falls back)."""
    from wren.speech.asr.moonshine import MoonshineNotInstalled, load_moonshine

    try:
        return load_moonshine(config, max_streams)
    except MoonshineNotInstalled as exc:
        # The default engine on a box where pip could not install its x86_64-only wheel (an ARM
        # Raspberry Pi): keep working with the bundled pocketsphinx, and say how to get Moonshine.
        log.warning("asr: %s; falling back to pocketsphinx", exc)
        return None


def without_moonshine(config: AsrConfig) -> AsrConfig:
    """The fallback when moonshine is not installed: the bundled pocketsphinx model."""
    return dataclasses.replace(config, engine="pocketsphinx", model_path="")


def load_in_process(config: AsrConfig, max_streams: int = 0) -> AsrEngine:
    """The configured engine, loaded here whatever `config.workers` says; at most `max_streams` streams
    open at once (`wren.speech.asr.cap`; 0 = no limit)."""
    engine = engine_name(config)
    if engine == "moonshine":
        loaded = try_moonshine(config, max_streams)
        if loaded is not None:
            return loaded
        config, engine = without_moonshine(config), "pocketsphinx"
    if engine == "pocketsphinx":
        from wren.speech.asr.pocketsphinx_engine import PocketsphinxEngine

        return PocketsphinxEngine(model_path=config.model_path, pool_size=config.pool_size,
                                  max_idle=config.max_idle_per_worker, max_streams=max_streams)
    from wren.speech.asr.vosk_engine import VoskEngine

    if not config.model_path:
        raise AsrError("asr.engine = vosk needs asr.model_path (a vosk model folder)")
    return VoskEngine(model_path=config.model_path, pool_size=config.pool_size,
                      max_idle=config.max_idle_per_worker, max_streams=max_streams)
