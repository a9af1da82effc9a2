"""The TTS phrase cache: a phrase spoken before (or warmed at start) starts at once; the cache is bounded."""

from __future__ import annotations

import time

from wren.config import TtsConfig
from wren.speech.tts import load_tts
from wren.speech.tts.phrase_cache import MAX_CHARS, PhraseCache


class CountingVoice:
    name, sample_rate = "counting", 16000

    def __init__(self) -> None:
        self.calls: list[str] = []

    def synthesize(self, text: str):
        self.calls.append(text)
        yield text.encode() * 100


def test_the_default_engine_is_cached_and_a_repeated_phrase_is_not_synthesised_again():
    engine = load_tts(TtsConfig(natural_variation=False))
    assert isinstance(engine, PhraseCache) and engine.name == "piper"
    first = b"".join(engine.synthesize("You're welcome."))
    started = time.perf_counter()
    again = b"".join(engine.synthesize("You're welcome."))
    assert again == first and engine.hits == 1
    assert time.perf_counter() - started < 0.01


def test_long_texts_are_synthesised_every_time():
    voice = CountingVoice()
    cache = PhraseCache(voice)
    long_text = "word " * (MAX_CHARS // 4)
    for _ in range(2):
        list(cache.synthesize(long_text))
    assert len(voice.calls) == 2


def test_the_least_recently_used_phrase_goes_first_past_the_byte_bound():
    voice = CountingVoice()
    cache = PhraseCache(voice, max_bytes=2500)  # room for two phrases of 1,100 bytes
    for text in ("one phrase.", "two phrase.", "one phrase.", "six phrase."):
        list(cache.synthesize(text))
    assert cache.cached("one phrase.") and cache.cached("six phrase.") and not cache.cached("two phrase.")


def test_warming_caches_each_chunk_as_a_reply_would_be_split():
    voice = CountingVoice()
    cache = PhraseCache(voice)
    added = cache.warm(["Sorry, I don't understand that yet. Ask me what I can do to hear what I know."])
    assert added == 2 and cache.cached("Sorry, I don't understand that yet.")
    assert cache.warm(["Sorry, I don't understand that yet."]) == 0  # already there
