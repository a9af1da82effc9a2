"""`wren wyoming` as Home Assistant sees it: a process on a port, spoken to with the `wyoming` client library;
and `[asr] engine = "wyoming"` (wren.speech.asr.wyoming) against it."""

from __future__ import annotations

import time

import pytest
from wren.config import AsrConfig
from wren.speech.asr import load_asr
from wren.speech.asr.errors import AsrError
from wren.speech.wyoming import BACKOFF_FIRST_S
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from tests.server.helpers import plain
from tests.support.processes import free_port
from tests.support.spoken import spoken_pcm
from tests.wyoming.conftest import JOE, moonshine, transcribe

pytestmark = pytest.mark.timeout(180)


def client(uri: str) -> AsyncTcpClient:
    host, _, port = uri.removeprefix("tcp://").rpartition(":")
    return AsyncTcpClient(host, int(port))


async def receive_audio(
    conn: AsyncTcpClient, until: str = "audio-stop"
) -> tuple[AudioStart, bytes, list[str]]:
    start, audio, types = None, b"", []
    while True:
        event = await conn.read_event()
        assert event is not None, "the server hung up"
        types.append(event.type)
        if AudioStart.is_type(event.type) and start is None:
            start = AudioStart.from_event(event)
        elif AudioChunk.is_type(event.type):
            audio += AudioChunk.from_event(event).audio
        if event.type == until:
            assert start is not None
            return start, audio, types


async def test_describe_lists_moonshine_and_the_joe_voice(wren_wyoming):
    async with client(wren_wyoming) as conn:
        await conn.write_event(Describe().event())
        event = await conn.read_event()
    info = Info.from_event(event)
    [asr] = info.asr
    assert asr.installed and asr.models[0].name == "moonshine"
    assert "en" in asr.models[0].languages
    [tts] = info.tts
    assert tts.supports_synthesize_streaming
    assert [v.name for v in tts.voices] == [JOE] and tts.voices[0].languages == ["en_US"]


async def test_synthesize_round_trip_gives_the_words_as_audio(wren_wyoming):
    async with client(wren_wyoming) as conn:
        await conn.write_event(Synthesize(text="What time is it?").event())
        start, audio, _ = await receive_audio(conn)
    assert (start.rate, start.width, start.channels) == (22050, 2, 1)
    from wren.speech.resample import resample_all

    assert plain(transcribe(resample_all(audio, 22050, 16000))) == "what time is it"


async def test_streamed_synthesis_ends_with_synthesize_stopped(wren_wyoming):
    async with client(wren_wyoming) as conn:
        await conn.write_event(SynthesizeStart().event())
        for piece in ("Good morning", ". It is a", " sunny day."):
            await conn.write_event(SynthesizeChunk(text=piece).event())
        await conn.write_event(Synthesize(text="Good morning. It is a sunny day.").event())  # ignored
        await conn.write_event(SynthesizeStop().event())
        _, audio, types = await receive_audio(conn, until=SynthesizeStopped().event().type)
    assert types.count("audio-start") == types.count("audio-stop") >= 2  # one per sentence, as it is ready
    assert len(audio) / 2 / 22050 > 1.0


@pytest.mark.parametrize("rate", [16000, 22050])
async def test_spoken_audio_is_transcribed_at_any_rate(wren_wyoming, rate):
    pcm = spoken_pcm("what time is it", rate)
    async with client(wren_wyoming) as conn:
        await conn.write_event(Transcribe(language="en").event())
        await conn.write_event(AudioStart(rate=rate, width=2, channels=1).event())
        step = 1024 * 2
        for i in range(0, len(pcm), step):
            chunk = AudioChunk(rate=rate, width=2, channels=1, audio=pcm[i : i + step])
            await conn.write_event(chunk.event())
        await conn.write_event(AudioStop().event())
        event = await conn.read_event()
    assert Transcript.is_type(event.type)
    assert plain(Transcript.from_event(event).text) == "what time is it"


async def test_one_connection_serves_utterance_after_utterance(wren_wyoming):
    async with client(wren_wyoming) as conn:
        for said in ("what time is it", "what day is it"):
            pcm = spoken_pcm(said, 16000)
            await conn.write_event(AudioStart(rate=16000, width=2, channels=1).event())
            await conn.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm).event())
            await conn.write_event(AudioStop().event())
            assert plain(Transcript.from_event(await conn.read_event()).text) == said


def test_the_wyoming_asr_engine_streams_an_utterance_to_wren_wyoming(wren_wyoming):
    engine = load_asr(AsrConfig(engine="wyoming", uri=wren_wyoming))
    assert engine.name == "wyoming" and engine.sample_rate == 16000
    stream = engine.open_stream(speaker="device-1")
    try:
        pcm = spoken_pcm("what time is it", 16000)
        for i in range(0, len(pcm), 1920):  # 60 ms device frames, as the recognise stage feeds them
            stream.accept(pcm[i : i + 1920])
        assert plain(stream.finish()) == "what time is it"
        assert plain(stream.finish()) == "what time is it"  # idempotent
    finally:
        stream.close()
    with pytest.raises(AsrError):
        stream.accept(b"\0\0")


def test_the_wyoming_asr_engine_fails_cleanly_while_the_server_is_down_then_reconnects(wyoming_thread):
    port = free_port()
    engine = load_asr(AsrConfig(engine="wyoming", uri=f"tcp://127.0.0.1:{port}", timeout_s=2.0))
    with pytest.raises(AsrError, match=r"down|unreachable"):
        engine.open_stream()
    server = wyoming_thread(asr=moonshine())
    server.stop()
    server.port = port
    server.start()
    time.sleep(BACKOFF_FIRST_S * 2 + 0.1)
    stream = engine.open_stream()
    try:
        stream.accept(spoken_pcm("what time is it", 16000))
        assert plain(stream.finish()) == "what time is it"
    finally:
        stream.close()
    assert engine.streams.open == 0  # the stream's slot under [limits] asr_streams is released


def test_a_malformed_uri_is_one_line_and_exit_code_2_before_any_model_loads():
    import subprocess
    import sys

    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "wren.cli", "wyoming", "--uri", "http://127.0.0.1:10300"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["wren wyoming: --uri must be tcp://host:port "
                                                "(got 'http://127.0.0.1:10300')"]
    assert time.monotonic() - started < 20


@pytest.mark.parametrize("uri", ["", "tcp://127.0.0.1", "unix:///tmp/asr.sock"])
def test_the_wyoming_asr_engine_needs_a_tcp_uri(uri):
    with pytest.raises(AsrError):
        load_asr(AsrConfig(engine="wyoming", uri=uri))


async def test_a_malformed_event_gets_an_error_and_the_connection_closes(wyoming_thread):
    from wyoming.event import Event

    server = wyoming_thread()
    async with client(server.uri) as conn:
        await conn.write_event(Event(type="audio-chunk", data={"width": 2}, payload=b"\0\0"))  # no rate
        event = await conn.read_event()
        assert event is not None and event.type == "error"
        assert await conn.read_event() is None  # hung up


async def test_audio_past_the_utterance_limit_is_ignored(wyoming_thread):
    server = wyoming_thread()
    server.services.max_utterance_bytes = 16000 * 2 * 2  # two seconds
    speech = spoken_pcm("what time is it", 16000)
    async with client(server.uri) as conn:
        await conn.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        for pcm in (speech, spoken_pcm("thank you very much", 16000)):
            await conn.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm).event())
        await conn.write_event(AudioStop().event())
        text = Transcript.from_event(await conn.read_event()).text
    assert "thank" not in plain(text) and "time" in plain(text)


def test_no_transcript_within_the_timeout_ends_the_utterance_with_an_error(silent_wyoming):
    engine = load_asr(AsrConfig(engine="wyoming", uri=silent_wyoming, timeout_s=0.5))
    stream = engine.open_stream()
    try:
        stream.accept(spoken_pcm("what time is it", 16000))
        started = time.monotonic()
        with pytest.raises(AsrError, match="no answer within"):
            stream.finish()
        assert time.monotonic() - started < 3.0
    finally:
        stream.close()
    assert engine.streams.open == 0


class RefusingAsr:
    """A recogniser with no stream to give (the stream ceiling reached, or its own server down)."""

    name = "refusing"
    sample_rate = 16000

    def open_stream(self, speaker: str | None = None):
        from wren.speech.asr.errors import AsrUnavailable

        raise AsrUnavailable("no recogniser free (test)")


class BrokenVoice:
    name = "broken"
    sample_rate = 22050

    def synthesize(self, text: str):
        raise RuntimeError("the voice file is corrupt (test)")
        yield b""


async def test_a_refused_utterance_is_one_error_event_and_the_connection_goes_on(wyoming_thread):
    server = wyoming_thread(asr=RefusingAsr(), tts=BrokenVoice())
    async with client(server.uri) as conn:
        await conn.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        for _ in range(5):
            await conn.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=bytes(3200)).event())
        await conn.write_event(AudioStop().event())
        await conn.write_event(Synthesize(text="Hello.").event())
        await conn.write_event(Describe().event())
        types = []
        while not types or types[-1] != "info":
            event = await conn.read_event()
            assert event is not None
            types.append(event.type)
    assert types == ["error", "error", "info"]  # once for the utterance, once for the voice
