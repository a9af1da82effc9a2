"""`[tts] engine = "wyoming"` (wren.speech.tts.wyoming) against real Wyoming servers: wyoming-piper from
PyPI with the joe voice, and Wren's own server around test voices."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
from wren.config import TtsConfig
from wren.speech.tts import load_tts
from wren.speech.tts.base import TtsError
from wren.speech.tts.wyoming import WyomingTtsEngine
from wren.speech.wyoming import BACKOFF_FIRST_S

from tests.server.helpers import plain
from tests.support.processes import free_port
from tests.wyoming.conftest import JOE, transcribe


def to_16k(pcm: bytes, rate: int) -> bytes:
    from wren.speech.resample import resample_all

    return resample_all(pcm, rate, 16000)


def test_wyoming_piper_speech_streams_in_chunks_and_says_the_text(wyoming_piper):
    engine = WyomingTtsEngine(wyoming_piper, voice=JOE)
    chunks = list(engine.synthesize("What time is it?"))
    assert len(chunks) > 3  # streamed as the server sends it, not one buffer at the end
    pcm = b"".join(chunks)
    assert 0.6 < len(pcm) / 2 / engine.sample_rate < 3.0
    assert plain(transcribe(to_16k(pcm, engine.sample_rate))) == "what time is it"


def test_wyoming_piper_is_loaded_through_the_config_with_the_phrase_cache(wyoming_piper):
    engine = load_tts(TtsConfig(engine="wyoming", uri=wyoming_piper, voice=JOE))
    assert engine.name == "wyoming" and engine.sample_rate == 22050
    first = b"".join(engine.synthesize("You're welcome."))
    assert first and engine.cached("You're welcome.")
    assert b"".join(engine.synthesize("You're welcome.")) == first  # a fixed phrase: no second request


class ToneVoice:
    """A voice at 16 kHz: one second of tone per request (checks the conversion), texts recorded."""

    name = "tone"
    sample_rate = 16000

    def __init__(self) -> None:
        self.texts: list[str] = []  # what the Wyoming server was asked to say

    def synthesize(self, text: str) -> Iterator[bytes]:
        self.texts.append(text)
        t = np.arange(16000) / 16000
        tone = (np.sin(2 * np.pi * 440 * t) * 8000).astype("<i2").tobytes()
        yield tone[:16000]
        yield tone[16000:]


def test_markdown_is_stripped_and_unsayable_text_sends_no_request(wyoming_thread):
    voice = ToneVoice()
    engine = WyomingTtsEngine(wyoming_thread(tts=voice).uri)
    assert list(engine.synthesize("🙂 **")) == []
    assert b"".join(engine.synthesize("**Hello** there."))
    assert voice.texts == ["Hello there."]


def test_audio_at_another_rate_is_resampled_to_the_promised_rate(wyoming_thread):
    server = wyoming_thread(tts=ToneVoice())
    engine = WyomingTtsEngine(server.uri)
    pcm = b"".join(engine.synthesize("a tone"))
    assert abs(len(pcm) / 2 - 22050) < 50  # one second at 22,050 Hz


def test_a_dead_server_fails_the_sentence_then_backs_off_then_reconnects(wyoming_thread):
    port = free_port()
    engine = WyomingTtsEngine(f"tcp://127.0.0.1:{port}", timeout_s=2.0)  # loads: the server may come later
    assert engine.link.down
    with pytest.raises(TtsError, match="down; next try"):  # within the backoff: fails at once, no connect
        list(engine.synthesize("Hello."))
    time.sleep(BACKOFF_FIRST_S + 0.05)
    with pytest.raises(TtsError, match="unreachable"):  # past it: tried again, still down
        list(engine.synthesize("Hello."))
    server = wyoming_thread(tts=ToneVoice())
    server.stop()
    server.port = port
    server.start()
    time.sleep(BACKOFF_FIRST_S * 2 + 0.1)  # past the second failure's backoff
    assert b"".join(engine.synthesize("Hello.")), "spoken again once the server is back"
    assert not engine.link.down


def test_a_server_that_never_answers_times_out(silent_wyoming):
    engine = WyomingTtsEngine(silent_wyoming, timeout_s=0.5)  # its Describe at load times out too: logged
    started = time.monotonic()
    with pytest.raises(TtsError, match="no answer within"):
        list(engine.synthesize("Hello."))
    assert time.monotonic() - started < 3.0


@pytest.mark.parametrize("uri", ["", "http://127.0.0.1:10200", "tcp://127.0.0.1", "tcp://:10200"])
def test_a_missing_or_malformed_uri_is_a_load_error(uri):
    with pytest.raises(TtsError):
        load_tts(TtsConfig(engine="wyoming", uri=uri))
