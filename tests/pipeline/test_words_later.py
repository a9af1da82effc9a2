"""A recogniser that finishes later (Moonshine's `finish_later`): the uplink hands out its future instead of
waiting on a listen thread, and the session awaits the words on the event loop."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from types import SimpleNamespace

from wren.config import VadConfig
from wren.pipeline.batched_executor import BatchedExecutor
from wren.pipeline.frames import EndOfInput, InputEnd, SpeechOnset, StageError, Transcribing, Utterance
from wren.pipeline.recognise import RecogniseStage, settle, settle_async
from wren.pipeline.timing import UplinkTiming
from wren.pipeline.turn_detection import ListenMode
from wren.session.listening import Listener
from wren.speech.asr.errors import AsrError

from tests.pipeline.test_uplink_stages import (
    SILENT_PACKET,
    SPEECH_PACKET,
    FakeAsrEngine,
    FakeAsrStream,
    FakeDecoder,
    FakeVad,
    chunk,
)


class LaterAsrStream(FakeAsrStream):
    """Its words come when the test says so (`words.set_result`), as a busy decode thread would."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.words: Future = Future()

    def finish_later(self) -> Future:
        self._call("finish_later")
        return self.words


def ended(stage: RecogniseStage) -> list:
    stage.process(SpeechOnset())
    stage.process(chunk(2))
    end = EndOfInput(InputEnd.SILENCE, time.monotonic(), heard_speech=True, audio_ms=600)
    return list(stage.process(end))


def test_the_stage_hands_out_the_pending_words_and_the_stream_closes_once_they_are_out():
    engine = FakeAsrEngine(LaterAsrStream)
    stage = RecogniseStage(engine, 100)
    [pending] = ended(stage)
    assert isinstance(pending, Transcribing) and not pending.words.done()
    stream = engine.streams[0]
    stage.close()  # the uplink is released at once: that must not cancel the decode or close the stream
    assert "close" not in stream.calls and not stream.words.cancelled()
    stream.words.set_result("  turn the lights on  ")
    assert stream.calls[-1] == "close"
    [utterance] = settle(pending)
    assert isinstance(utterance, Utterance) and utterance.text == "turn the lights on"
    assert (utterance.reason, utterance.audio_ms, utterance.heard_speech) == (InputEnd.SILENCE, 600, True)
    assert utterance.decoded_at >= utterance.ended_at


def test_words_that_fail_later_give_a_stage_error_and_an_empty_utterance():
    engine = FakeAsrEngine(LaterAsrStream)
    [pending] = ended(RecogniseStage(engine, 100))
    engine.streams[0].words.set_exception(AsrError("the decode failed"))
    error, utterance = settle(pending)
    assert isinstance(error, StageError) and error.stage == "recognise"
    assert isinstance(utterance, Utterance) and utterance.text == ""


async def test_awaiting_the_words_gives_way_to_the_loop_and_a_cancelled_decode_costs_only_the_words():
    engine = FakeAsrEngine(LaterAsrStream)
    [pending] = ended(RecogniseStage(engine, 100))
    waiting = asyncio.ensure_future(settle_async(pending))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # the loop ran on meanwhile
    engine.streams[0].words.cancel()  # the engine is closing
    error, utterance = await waiting
    assert isinstance(error, StageError) and utterance.text == ""


async def test_a_session_awaiting_its_words_does_not_hold_the_listen_thread_from_other_sessions():
    pool = BatchedExecutor(1, "test-words-later")  # one listen thread: a blocking finish would stall B
    engine = FakeAsrEngine(LaterAsrStream)
    speech = SimpleNamespace(vad=FakeVad(), asr=engine)

    def listener(name: str) -> Listener:
        made = Listener(speech, VadConfig(), pool, UplinkTiming(name), name)
        made.configure(FakeDecoder(), 16000, None)
        return made

    a, b = listener("a"), listener("b")
    try:
        await a.begin(ListenMode.MANUAL)
        await b.begin(ListenMode.MANUAL)
        await a.feed([(SPEECH_PACKET, None)] * 5)
        a_words = asyncio.ensure_future(a.end())
        await asyncio.sleep(0.05)
        assert not a_words.done()  # A's recogniser is still decoding
        fed = [(SILENT_PACKET, None)] * 10
        await asyncio.wait_for(b.feed(fed), 2.0)  # B's audio goes through meanwhile
        assert fed == []
        engine.streams[0].words.set_result("what time is it")
        utterance = await asyncio.wait_for(a_words, 2.0)
        assert utterance.text == "what time is it" and utterance.reason is InputEnd.LISTEN_STOP
    finally:
        await a.close()
        await b.close()
        pool.shutdown()


async def test_on_the_loop_a_long_run_of_frames_is_fed_a_few_at_a_time_and_the_rest_stays_queued():
    from wren.session.listening import LOOP_RUN_FRAMES

    pool = BatchedExecutor(1, "test-on-loop", on_loop=True)
    speech = SimpleNamespace(vad=FakeVad(), asr=FakeAsrEngine(LaterAsrStream))
    listener = Listener(speech, VadConfig(), pool, UplinkTiming("a"), "a")
    listener.configure(FakeDecoder(), 16000, None)
    try:
        await listener.begin(ListenMode.MANUAL)
        backlog = [(SILENT_PACKET, time.monotonic())] * (LOOP_RUN_FRAMES * 3 + 1)
        await listener.feed(backlog)
        assert len(backlog) == LOOP_RUN_FRAMES * 2 + 1  # one loop round's share went through
        while backlog:
            await listener.feed(backlog)
        assert listener.timing.frames == LOOP_RUN_FRAMES * 3 + 1
    finally:
        await listener.close()
        pool.shutdown(wait=True)
