"""The TTS phrase cache: a phrase spoken before (or warmed at start) starts at once; the cache is bounded."""

from __future__ import annotations

from wren.config import TtsConfig
from wren.speech.sentences import SentenceSplitter
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
    again = b"".join(engine.synthesize("You're welcome."))
    assert again == first and engine.hits == 1  # from the cache: counted, not timed (the box may be busy)


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


def test_every_chunk_of_the_built_in_agents_fixed_replies_is_cached_by_the_warm_up():
    from wren.agent.engines.builtin import FIXED_REPLIES, LEAD_INS

    voice = CountingVoice()
    cache = PhraseCache(voice)
    cache.warm([*FIXED_REPLIES, *LEAD_INS])
    chunks = [chunk for reply in [*FIXED_REPLIES, *LEAD_INS] for chunk in _as_a_reply_splits(reply)]
    assert len(chunks) > len(FIXED_REPLIES) and [chunk for chunk in chunks if not cache.cached(chunk)] == []
    voice.calls.clear()
    for chunk in chunks:
        list(cache.synthesize(chunk))
    assert voice.calls == []  # no chunk of a fixed reply waits for piper


def _as_a_reply_splits(reply: str) -> list[str]:
    splitter = SentenceSplitter()
    return [*splitter.feed(reply), *splitter.flush()]


def test_a_reply_that_starts_with_a_cached_clause_starts_with_its_audio_and_synthesises_only_the_rest():
    voice = CountingVoice()
    cache = PhraseCache(voice)
    cache.warm(["Okay,"])
    audio = b"".join(cache.synthesize("Okay, a timer for 10 minutes,"))
    assert voice.calls == ["Okay,", "a timer for 10 minutes"]  # the rest, cleaned for speech
    assert audio == b"Okay," * 100 + b"a timer for 10 minutes" * 100
    assert cache.lead_in_hits == 1
    assert b"".join(cache.synthesize("Okay, a timer for 10 minutes,")) == audio  # now cached whole
    assert len(voice.calls) == 2


def test_an_uncached_first_clause_or_a_clause_alone_is_synthesised_as_it_is():
    voice = CountingVoice()
    cache = PhraseCache(voice)
    cache.warm(["Okay,"])
    list(cache.synthesize("Sure, a timer for 10 minutes,"))  # "Sure," was never cached
    list(cache.synthesize("Okay, "))  # nothing after the clause: the cached phrase itself
    assert voice.calls == ["Okay,", "Sure, a timer for 10 minutes,"]
    assert cache.lead_in_hits == 0


def test_the_builtin_agents_varying_replies_start_with_a_warmed_first_clause():
    from datetime import datetime, timedelta

    from wren.agent.engines.builtin import BuiltinEngine
    from wren.speech.sentences import SentenceSplitter

    fixed = set(BuiltinEngine().fixed_phrases())
    for day in range(7):  # 2026-11-30 is a Monday: every weekday's date reply
        now = datetime(2026, 11, 30) + timedelta(days=day)
        first = SentenceSplitter().feed(f"Today is {now:%A}, {now:%B} {now.day}, {now.year}.")[0]
        assert first in fixed
    assert SentenceSplitter().feed("Nice to meet you, Alice. I'll remember your name.")[0] in fixed
    assert "Okay," in fixed


def test_a_text_starts_cached_when_it_or_its_first_clause_is_in_the_cache():
    cache = PhraseCache(CountingVoice())
    cache.warm(["Okay.", "Sure,"])
    assert cache.starts_cached("Okay.") and cache.starts_cached("Sure, a timer for ten minutes.")
    assert not cache.starts_cached("It's three o'clock.") and not cache.starts_cached("Okay then.")
