"""Text to speech: `load_tts(config) -> TtsEngine`; `engine.synthesize(text)` is a blocking generator of
int16 mono PCM chunks at `engine.sample_rate`, yielded as the engine produces them (piper: one per sentence),
so the session can start sending the first sentence while later ones are still being synthesised."""

from __future__ import annotations

from typing import TYPE_CHECKING

from wren.config import TtsConfig
from wren.speech.tts.base import TtsEngine, TtsError

if TYPE_CHECKING:
    from wren.speech.tts.phrase_store import PhraseStore


def load_tts(config: TtsConfig) -> TtsEngine:
    engine = config.engine.lower()
    voice: TtsEngine
    if engine == "piper":
        from wren.speech.tts.piper_engine import PiperEngine

        voice = PiperEngine(
            voice_path=config.voice_path,
            length_scale=config.length_scale,
            deterministic=not config.natural_variation,
            nice=config.nice,
            idle=config.idle_priority,
        )
    elif engine == "wyoming":  # a remote server: its phrases are cached too (no round trip, no remote CPU)
        from wren.speech.tts.wyoming import load_wyoming_tts

        voice = load_wyoming_tts(config)
    else:
        raise TtsError(f"unknown TTS engine {config.engine!r} (piper, wyoming)")
    if config.phrase_cache_kb <= 0:
        return voice
    from wren.speech.tts.phrase_cache import PhraseCache

    return PhraseCache(voice, max_bytes=config.phrase_cache_kb * 1024, store=_phrase_store(config, voice))


def _phrase_store(config: TtsConfig, voice: TtsEngine) -> PhraseStore | None:
    """Where the warmed phrases are kept between starts; None when off, or for a voice without an identity
    (a Wyoming server's voice may change behind its name)."""
    identity = getattr(voice, "identity", None)
    if not config.persist_phrases or not identity:
        return None
    from wren.speech.cache_dir import default_cache_dir
    from wren.speech.tts.phrase_store import PhraseStore

    return PhraseStore(default_cache_dir(config.cache_dir), identity, voice.sample_rate)


__all__ = ["TtsEngine", "TtsError", "load_tts"]
