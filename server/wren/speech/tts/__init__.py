"""Text to speech: `load_tts(config) -> TtsEngine`; `engine.synthesize(text)` is a blocking generator of
int16 mono PCM chunks at `engine.sample_rate`, yielded as the engine produces them (piper: one per sentence),
so the session can start sending the first sentence while later ones are still being synthesised."""

from __future__ import annotations

from wren.config import TtsConfig
from wren.speech.tts.base import TtsEngine, TtsError


def load_tts(config: TtsConfig) -> TtsEngine:
    engine = config.engine.lower()
    if engine == "piper":
        from wren.speech.tts.piper_engine import PiperEngine

        piper = PiperEngine(
            voice_path=config.voice_path,
            length_scale=config.length_scale,
            deterministic=not config.natural_variation,
        )
        if config.phrase_cache_kb <= 0:
            return piper
        from wren.speech.tts.phrase_cache import PhraseCache

        return PhraseCache(piper, max_bytes=config.phrase_cache_kb * 1024)
    raise TtsError(f"unknown TTS engine {config.engine!r} (piper)")


__all__ = ["TtsEngine", "TtsError", "load_tts"]
