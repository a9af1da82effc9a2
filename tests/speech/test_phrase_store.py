"""The warmed phrases kept on disk per voice: a restarted server reads them back instead of synthesising;
another voice or speed never plays them; a damaged file costs only a fresh synthesis; and the warm-up
waits while a person is in a turn."""

from __future__ import annotations

import threading
import time

from wren.config import TtsConfig
from wren.speech.tts import load_tts
from wren.speech.tts.phrase_cache import PhraseCache
from wren.speech.tts.phrase_store import MAGIC, PhraseStore

PHRASES = ["You're welcome.", "Sorry, I don't understand that yet. Ask me what I can do."]


class CountingVoice:
    name, sample_rate = "counting", 16000

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def synthesize(self, text: str):
        self.calls.append((text, time.monotonic()))
        yield text.encode() * 100
        yield b"\x01\x02" * 50  # a second chunk: phrases are stored chunk by chunk


def test_a_restarted_server_reads_its_warmed_phrases_back_instead_of_synthesising_them(tmp_path):
    first_voice = CountingVoice()
    first = PhraseCache(first_voice, store=PhraseStore(tmp_path, "counting v1", 16000))
    assert first.warm(PHRASES) == 3
    assert first.store is not None and first.store.path.is_file()

    voice = CountingVoice()
    again = PhraseCache(voice, store=PhraseStore(tmp_path, "counting v1", 16000))
    assert again.warm(PHRASES) == 0 and voice.calls == []
    for text in ("You're welcome.", "Sorry, I don't understand that yet.", "Ask me what I can do."):
        assert list(again.synthesize(text)) == list(first.synthesize(text))
    assert voice.calls == [] and again.hits == 3


def test_another_voice_identity_does_not_get_the_stored_audio(tmp_path):
    PhraseCache(CountingVoice(), store=PhraseStore(tmp_path, "voice A", 16000)).warm(PHRASES)
    voice = CountingVoice()
    other = PhraseCache(voice, store=PhraseStore(tmp_path, "voice A slower", 16000))
    assert other.warm(PHRASES) == 3 and len(voice.calls) == 3


def test_a_damaged_or_foreign_store_is_ignored_and_written_anew(tmp_path, caplog):
    store = PhraseStore(tmp_path, "counting v1", 16000)
    PhraseCache(CountingVoice(), store=store).warm(PHRASES)
    whole = store.path.read_bytes()
    for damaged in (whole[: len(whole) - 7], b"not a phrase store", MAGIC + b"\xff\xff\xff\x7f{"):
        store.path.write_bytes(damaged)
        voice = CountingVoice()
        cache = PhraseCache(voice, store=PhraseStore(tmp_path, "counting v1", 16000))
        assert cache.warm(PHRASES) == 3 and len(voice.calls) == 3
        assert store.path.read_bytes() == whole  # rewritten whole
    assert "ignoring the phrase store" in caplog.text


def test_a_store_that_cannot_be_written_leaves_the_cache_warm_in_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder would be")
    voice = CountingVoice()
    cache = PhraseCache(voice, store=PhraseStore(blocker, "counting v1", 16000))
    assert cache.warm(PHRASES) == 3 and cache.cached("You're welcome.")


def test_the_warm_up_synthesises_nothing_while_a_person_is_in_a_turn():
    voice = CountingVoice()
    cache = PhraseCache(voice)
    in_turn = threading.Event()
    in_turn.set()
    warming = threading.Thread(target=cache.warm, args=(PHRASES, in_turn.is_set))
    warming.start()
    time.sleep(0.3)
    assert voice.calls == []  # held back for as long as the turn lasts
    turn_over = time.monotonic()
    in_turn.clear()
    warming.join(5)
    assert [text for text, _ in voice.calls] == ["You're welcome.", "Sorry, I don't understand that yet.",
                                                 "Ask me what I can do."]
    assert all(at >= turn_over for _, at in voice.calls)


def test_piper_keeps_one_store_per_voice_and_speed_and_reads_it_back_at_the_next_start(tmp_path):
    config = TtsConfig(natural_variation=False, cache_dir=str(tmp_path))
    first = load_tts(config)
    assert first.warm(["You're welcome."]) == 1
    audio = b"".join(first.synthesize("You're welcome."))

    restarted = load_tts(config)
    assert restarted.warm(["You're welcome."]) == 0
    assert b"".join(restarted.synthesize("You're welcome.")) == audio

    slower = load_tts(TtsConfig(natural_variation=False, cache_dir=str(tmp_path), length_scale=1.3))
    assert slower.store.path != restarted.store.path
    assert slower.warm(["You're welcome."]) == 1
    assert len(b"".join(slower.synthesize("You're welcome."))) > len(audio)

    off = load_tts(TtsConfig(natural_variation=False, cache_dir=str(tmp_path), persist_phrases=False))
    assert off.store is None
