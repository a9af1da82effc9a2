"""The downlink alone: `Pipeline`, then respond → synthesise → pace, each fed frames and checked by frames.

No socket and no model: a TTS that yields the PCM it is told to, a sink that records what it was asked
to send, and a playback pacer on a fake clock (no real sleeping).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from wren.pipeline.downlink import DownlinkFormat
from wren.pipeline.frames import (
    EmotionFrame,
    EndOfStream,
    Frame,
    Packet,
    Sentence,
    StageError,
    TextDelta,
)
from wren.pipeline.pace import PaceStage, TurnEnded
from wren.pipeline.pacer import PlaybackPacer
from wren.pipeline.respond import DEFAULT_EMOTION, RespondStage
from wren.pipeline.stage import Pipeline, Stage, StageCancelled
from wren.pipeline.synthesise import SynthesiseStage
from wren.pipeline.timing import TurnTiming

from tests.support.clock import FakeClock

# ---- helpers and test doubles ---------------------------------------------------------------------


class Collect:
    """A `push` that keeps what it is given."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []

    async def __call__(self, frame: Frame) -> None:
        self.frames.append(frame)

    def take(self) -> list[Frame]:
        frames, self.frames = self.frames, []
        return frames


async def frames_of(*frames: Frame):
    for frame in frames:
        yield frame


def deltas(n: int) -> list[TextDelta]:
    return [TextDelta(str(i)) for i in range(n)]


class Recorder(Stage):
    """Passes every frame on, writing what it did in a shared log; its flush puts out one more frame."""

    def __init__(self, name: str, log: list) -> None:
        self.name = name
        self.log = log
        self.seen: list[Frame] = []

    async def process(self, frame: Frame, push) -> None:
        self.seen.append(frame)
        self.log.append((self.name, frame))
        await push(frame)

    async def flush(self, push) -> None:
        self.log.append((self.name, "flush"))
        await push(TextDelta(f"flushed by {self.name}"))


class Gate(Stage):
    """Holds every frame until `gate` is set; records whether it was cancelled while waiting."""

    def __init__(self, name: str = "gate") -> None:
        self.name = name
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()
        self.seen: list[Frame] = []
        self.cancelled = False

    async def process(self, frame: Frame, push) -> None:
        self.entered.set()
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        self.seen.append(frame)
        await push(frame)


class FailOn(Stage):
    name = "fail-on"

    def __init__(self, text: str) -> None:
        self.text = text

    async def process(self, frame: Frame, push) -> None:
        if isinstance(frame, TextDelta) and frame.text == self.text:
            raise ValueError(f"cannot handle {self.text!r}")
        await push(frame)


def pipeline_tasks(name: str) -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith(f"{name}:")]


async def settle(rounds: int = 50) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


# ---- Pipeline -------------------------------------------------------------------------------------


async def test_frames_reach_the_last_stage_in_order():
    log: list = []
    first, last = Recorder("first", log), Recorder("last", log)
    sent = deltas(50)
    await Pipeline([first, last], [1, 3]).run(frames_of(*sent))
    assert first.seen == sent
    assert last.seen == [*sent, TextDelta("flushed by first")]


async def test_end_of_stream_flushes_every_stage_in_order():
    log: list = []
    stages = [Recorder(name, log) for name in ("a", "b", "c")]
    await Pipeline(stages, [2, 2, 2]).run(frames_of(TextDelta("x")))
    flushes = [entry for entry in log if entry[1] == "flush"]
    assert flushes == [("a", "flush"), ("b", "flush"), ("c", "flush")]
    # each stage's flush output reaches the next stage before that stage flushes
    assert log.index(("b", TextDelta("flushed by a"))) < log.index(("b", "flush"))
    assert log.index(("c", TextDelta("flushed by b"))) < log.index(("c", "flush"))
    assert not any(isinstance(frame, EndOfStream) for _, frame in log)  # EndOfStream is not processed


async def test_a_blocked_last_stage_back_pressures_the_source():
    yielded = 0

    async def source():
        nonlocal yielded
        for frame in deltas(100):
            yielded += 1
            yield frame

    log: list = []
    gate = Gate("last")
    run = asyncio.create_task(Pipeline([Recorder("first", log), gate], [1, 1], name="bp").run(source()))
    await gate.entered.wait()
    await settle()
    # in flight at most: the frame the gate holds, one per queue, one per producer waiting to put
    in_flight = 1 + 1 + 1 + 1 + 1
    assert yielded <= in_flight
    held = yielded
    await settle()
    assert yielded == held  # the source is not drained ahead while the last stage is blocked
    gate.gate.set()
    await asyncio.wait_for(run, 2)
    assert yielded == 100
    assert gate.seen == [*deltas(100), TextDelta("flushed by first")]


async def test_an_exception_in_a_stage_ends_run_with_it_and_cancels_the_other_stages():
    gate = Gate("downstream")
    pipeline = Pipeline([FailOn("2"), gate], [1, 1], name="boom")
    with pytest.raises(ValueError, match="cannot handle '2'"):
        await asyncio.wait_for(pipeline.run(frames_of(*deltas(10))), 2)
    assert gate.cancelled
    assert all(task.done() for task in pipeline_tasks("boom"))


async def test_an_exception_in_the_source_ends_run_with_it():
    async def source():
        yield TextDelta("a")
        raise OSError("the agent's stream broke")

    gate = Gate()
    with pytest.raises(OSError, match="stream broke"):
        await asyncio.wait_for(Pipeline([gate], [1]).run(source()), 2)
    assert gate.cancelled


async def test_cancelling_run_cancels_every_task():
    gate = Gate("last")
    run = asyncio.create_task(Pipeline([Recorder("first", []), gate], [1, 1], name="cx").run(
        frames_of(*deltas(20))))
    await gate.entered.wait()
    assert len(pipeline_tasks("cx")) == 3
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert gate.cancelled
    assert all(task.done() for task in pipeline_tasks("cx"))


async def test_a_stage_that_ends_cancelled_on_its_own_ends_the_pipeline():
    class CancelledInside(Stage):
        name = "cancelled-inside"

        async def process(self, frame: Frame, push) -> None:
            raise asyncio.CancelledError()  # as when an awaited inner future was cancelled

    pipeline = Pipeline([CancelledInside(), Recorder("last", [])], [1, 1], name="selfcancel")
    with pytest.raises(StageCancelled, match="cancelled-inside"):
        await asyncio.wait_for(pipeline.run(frames_of(*deltas(3))), 0.2)  # ends: never a hang


@pytest.mark.parametrize("capacities", [[0, 1], [1, -1]])
def test_every_queue_must_hold_at_least_one_frame(capacities):
    with pytest.raises(ValueError, match="capacities"):
        Pipeline([Stage(), Stage()], capacities)


def test_one_capacity_per_stage():
    with pytest.raises(ValueError, match="one queue capacity per stage"):
        Pipeline([Stage(), Stage()], [1])


# ---- RespondStage ---------------------------------------------------------------------------------


async def test_text_deltas_become_sentences_as_soon_as_they_end():
    stage, push = RespondStage(), Collect()
    await stage.process(TextDelta("The weather is sun"), push)
    assert push.take() == []
    await stage.process(TextDelta("ny. It is"), push)
    assert push.take() == [EmotionFrame(DEFAULT_EMOTION), Sentence("The weather is sunny.")]
    await stage.process(TextDelta(" warm. And"), push)
    assert push.take() == [Sentence("It is warm.")]  # the default emotion only once


async def test_flush_puts_out_the_last_partial_sentence():
    stage, push = RespondStage(), Collect()
    await stage.process(TextDelta("The weather is sunny. And war"), push)
    push.take()
    await stage.process(TextDelta("m"), push)
    assert push.take() == []
    await stage.flush(push)
    assert push.take() == [Sentence("And warm")]
    await stage.flush(push)
    assert push.take() == []


async def test_a_reply_of_one_partial_sentence_still_gets_the_default_emotion_first():
    stage, push = RespondStage(), Collect()
    await stage.process(TextDelta("Sure"), push)
    await stage.flush(push)
    assert push.take() == [EmotionFrame(DEFAULT_EMOTION), Sentence("Sure")]


async def test_an_agent_emotion_suppresses_the_default_one():
    stage, push = RespondStage(), Collect()
    await stage.process(EmotionFrame("happy"), push)
    await stage.process(TextDelta("Great news for you. "), push)
    await stage.process(TextDelta("More"), push)
    await stage.flush(push)
    assert push.take() == [EmotionFrame("happy"), Sentence("Great news for you."), Sentence("More")]


async def test_an_agent_emotion_after_the_first_sentence_goes_out_as_it_comes():
    stage, push = RespondStage(), Collect()
    await stage.process(TextDelta("The weather is sunny. "), push)
    await stage.process(EmotionFrame("cool"), push)
    assert push.take() == [
        EmotionFrame(DEFAULT_EMOTION), Sentence("The weather is sunny."), EmotionFrame("cool"),
    ]


async def test_ready_made_sentences_pass_without_an_emotion_and_blank_ones_are_dropped():
    stage, push = RespondStage(), Collect()
    await stage.process(Sentence("Sorry, I did not catch that."), push)
    await stage.process(Sentence("   "), push)
    await stage.flush(push)
    assert push.take() == [Sentence("Sorry, I did not catch that.")]


async def test_other_frames_pass_the_respond_stage_unchanged():
    stage, push = RespondStage(), Collect()
    error = StageError("agent", RuntimeError("x"))
    await stage.process(error, push)
    assert push.take() == [error]


async def test_the_first_sentence_is_marked_in_the_turn_timing():
    timing = TurnTiming("kitchen", "speech")
    stage, push = RespondStage(timing), Collect()
    await stage.process(TextDelta("The weather is"), push)
    assert "first_sentence" not in timing.stamps
    await stage.process(TextDelta(" sunny. It"), push)
    first = timing.stamps["first_sentence"]
    await stage.process(TextDelta(" is warm. Yes"), push)
    assert timing.stamps["first_sentence"] == first


# ---- SynthesiseStage ------------------------------------------------------------------------------

PCM_16K_60MS = DownlinkFormat("pcm", 16000, 60)
FRAME_BYTES = 16000 * 60 // 1000 * 2


class FakeTts:
    """`synthesize(text)` yields the chunks scripted for that text; `fail` names texts it raises on
    (at the call) and `fail_midway` texts it raises on after their first chunk."""

    sample_rate = 16000

    def __init__(self, script: dict[str, list[bytes]], fail=(), fail_midway=()) -> None:
        self.script = script
        self.fail = set(fail)
        self.fail_midway = set(fail_midway)
        self.asked: list[str] = []

    def synthesize(self, text: str):
        self.asked.append(text)
        if text in self.fail:
            raise RuntimeError(f"TTS cannot say {text!r}")
        return self._chunks(text)

    def _chunks(self, text: str):
        for n, chunk in enumerate(self.script[text]):
            if n == 1 and text in self.fail_midway:
                raise RuntimeError(f"TTS died in {text!r}")
            yield chunk


@pytest.fixture
def speak_executor():
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-speak")
    yield executor
    executor.shutdown(wait=True)


async def test_a_sentence_goes_out_right_before_its_first_packet(speak_executor):
    tts = FakeTts({"Hello there.": [b"\x01" * 1000, b"\x02" * 3000]})
    stage, push = SynthesiseStage(tts, PCM_16K_60MS, speak_executor), Collect()
    await stage.process(Sentence("Hello there."), push)
    assert push.take() == [
        Sentence("Hello there."),  # the first chunk made no whole frame: the sentence waited for one
        Packet(b"\x01" * 1000 + b"\x02" * (FRAME_BYTES - 1000)),
        Packet(b"\x02" * FRAME_BYTES),
    ]


async def test_frames_that_are_not_sentences_pass_the_synthesise_stage(speak_executor):
    stage, push = SynthesiseStage(FakeTts({}), PCM_16K_60MS, speak_executor), Collect()
    await stage.process(EmotionFrame("happy"), push)
    assert push.take() == [EmotionFrame("happy")]


async def test_flush_emits_the_last_frame_padded_with_silence(speak_executor):
    tts = FakeTts({"One.": [b"\x03" * (FRAME_BYTES + 100)]})
    stage, push = SynthesiseStage(tts, PCM_16K_60MS, speak_executor), Collect()
    await stage.process(Sentence("One."), push)
    assert push.take() == [Sentence("One."), Packet(b"\x03" * FRAME_BYTES)]
    await stage.flush(push)
    assert push.take() == [Packet(b"\x03" * 100 + bytes(FRAME_BYTES - 100))]


async def test_flush_with_nothing_held_emits_nothing(speak_executor):
    tts = FakeTts({"One.": [b"\x03" * FRAME_BYTES]})
    stage, push = SynthesiseStage(tts, PCM_16K_60MS, speak_executor), Collect()
    await stage.process(Sentence("One."), push)
    push.take()
    await stage.flush(push)
    assert push.take() == []


@pytest.mark.parametrize("how", ["at the call", "midway"])
async def test_a_tts_failure_costs_one_sentence_and_the_next_is_still_synthesised(speak_executor, how):
    script = {
        "First.": [b"\x01" * FRAME_BYTES],
        "Broken.": [b"\x02" * FRAME_BYTES, b"\x02" * FRAME_BYTES],
        "Last.": [b"\x03" * FRAME_BYTES],
    }
    tts = FakeTts(script, fail={"Broken."} if how == "at the call" else (),
                  fail_midway={"Broken."} if how == "midway" else ())
    stage, push = SynthesiseStage(tts, PCM_16K_60MS, speak_executor), Collect()
    for text in ("First.", "Broken.", "Last."):
        await stage.process(Sentence(text), push)
    out = push.take()
    errors = [f for f in out if isinstance(f, StageError)]
    assert len(errors) == 1 and errors[0].stage == "synthesise" and isinstance(errors[0].error, RuntimeError)
    broken_audio = [Sentence("Broken."), Packet(b"\x02" * FRAME_BYTES)] if how == "midway" else []
    assert out == [
        Sentence("First."), Packet(b"\x01" * FRAME_BYTES),
        *broken_audio, errors[0],
        Sentence("Last."), Packet(b"\x03" * FRAME_BYTES),
    ]
    assert tts.asked == ["First.", "Broken.", "Last."]


async def test_synthesis_marks_the_turn_timing(speak_executor):
    timing = TurnTiming("kitchen", "speech")
    tts = FakeTts({"One.": [b"\x01" * 10, b"\x01" * FRAME_BYTES]})
    stage = SynthesiseStage(tts, PCM_16K_60MS, speak_executor, timing)
    await stage.process(Sentence("One."), Collect())
    assert timing.stamps["tts_first_pcm"] <= timing.stamps["first_packet"]


async def test_a_last_sentence_shorter_than_one_frame_is_still_announced(speak_executor):
    tts = FakeTts({"Ok.": [b"\x04" * 1000]})
    stage, push = SynthesiseStage(tts, PCM_16K_60MS, speak_executor), Collect()
    await stage.process(Sentence("Ok."), push)
    await stage.flush(push)
    assert push.take() == [Sentence("Ok."), Packet(b"\x04" * 1000 + bytes(FRAME_BYTES - 1000))]


# ---- PaceStage ------------------------------------------------------------------------------------


class FakeSink:
    """Records (kind, ..., clock time); `refuse` names the kinds that return False (turn not live)."""

    def __init__(self, clock: FakeClock, refuse=()) -> None:
        self.clock = clock
        self.refuse = set(refuse)
        self.calls: list[tuple] = []

    async def emotion(self, name: str) -> bool:
        self.calls.append(("emotion", name))
        return "emotion" not in self.refuse

    async def sentence(self, text: str) -> bool:
        self.calls.append(("sentence", text))
        return "sentence" not in self.refuse

    async def audio(self, packet: bytes, timestamp_ms: int) -> bool:
        self.calls.append(("audio", packet, timestamp_ms, round(self.clock.now, 6)))
        return "audio" not in self.refuse


FRAME_MS = 60
PREBUFFER = 2
DRAIN_MARGIN_MS = 100


def pace(refuse=()) -> tuple[PaceStage, FakeSink, FakeClock]:
    clock = FakeClock()
    sink = FakeSink(clock, refuse)
    pacer = PlaybackPacer(FRAME_MS, PREBUFFER, clock=clock, sleep=clock.sleep)
    return PaceStage(sink, pacer, FRAME_MS, DRAIN_MARGIN_MS), sink, clock


async def test_a_sentence_is_sent_right_before_its_first_packet_and_counts_as_spoken():
    stage, sink, _ = pace()
    push = Collect()
    await stage.process(Sentence("Hello there."), push)
    assert sink.calls == [] and stage.spoken == []
    await stage.process(Packet(b"a"), push)
    await stage.process(Packet(b"b"), push)
    await stage.process(Sentence("Bye."), push)
    await stage.process(Packet(b"c"), push)
    assert [c[:2] for c in sink.calls] == [
        ("sentence", "Hello there."), ("audio", b"a"), ("audio", b"b"), ("sentence", "Bye."), ("audio", b"c"),
    ]
    assert stage.spoken == ["Hello there.", "Bye."]
    assert push.frames == []  # the last stage: nothing goes further


async def test_audio_timestamps_advance_by_frame_ms():
    stage, sink, _ = pace()
    for n in range(5):
        await stage.process(Packet(bytes([n])), Collect())
    assert [c[2] for c in sink.calls] == [0, 60, 120, 180, 240]
    assert stage.frames_sent == 5


async def test_audio_goes_out_on_the_device_playback_clock():
    stage, sink, _ = pace()
    for n in range(6):
        await stage.process(Packet(bytes([n])), Collect())
    times = [c[3] for c in sink.calls]
    # the pre-buffer and the frame playing now leave at once, then one per frame duration
    assert times == pytest.approx([100.0] * (PREBUFFER + 1) + [100.06, 100.12, 100.18])


async def test_emotions_go_out_as_they_come():
    stage, sink, _ = pace()
    await stage.process(Sentence("Hi."), Collect())
    await stage.process(EmotionFrame("happy"), Collect())
    assert sink.calls == [("emotion", "happy")]


async def test_a_stage_error_is_not_sent_and_the_reply_goes_on():
    stage, sink, _ = pace()
    await stage.process(StageError("synthesise", RuntimeError("x")), Collect())
    await stage.process(Packet(b"a"), Collect())
    assert [c[0] for c in sink.calls] == ["audio"]


@pytest.mark.parametrize("refused", ["audio", "sentence", "emotion"])
async def test_a_sink_that_refuses_ends_the_turn(refused):
    stage, sink, _ = pace(refuse={refused})
    with pytest.raises(TurnEnded):
        if refused == "emotion":
            await stage.process(EmotionFrame("sad"), Collect())
        else:
            await stage.process(Sentence("Hi."), Collect())
            await stage.process(Packet(b"a"), Collect())
    if refused == "sentence":
        assert stage.spoken == [] and [c[0] for c in sink.calls] == ["sentence"]  # no audio after it
    if refused == "audio":
        assert stage.frames_sent == 0


async def test_flush_waits_until_the_device_has_played_everything():
    stage, _, clock = pace()
    for n in range(3):
        await stage.process(Packet(bytes([n])), Collect())
    assert clock.now == 100.0  # all three went out at once, within the pre-buffer
    await stage.flush(Collect())
    assert clock.now == pytest.approx(100.0 + 3 * FRAME_MS / 1000 + DRAIN_MARGIN_MS / 1000)


async def test_flush_without_audio_does_not_wait():
    stage, _, clock = pace()
    await stage.flush(Collect())
    assert clock.sleeps == []


# ---- the three joined -----------------------------------------------------------------------------


async def test_a_reply_flows_from_text_to_paced_audio(speak_executor):
    clock = FakeClock()
    sink = FakeSink(clock)
    tts = FakeTts({
        "The weather is sunny.": [b"\x01" * FRAME_BYTES * 2],
        "Enjoy": [b"\x02" * (FRAME_BYTES + 500)],
    })
    pacer = PlaybackPacer(FRAME_MS, PREBUFFER, clock=clock, sleep=clock.sleep)
    pace_stage = PaceStage(sink, pacer, FRAME_MS, DRAIN_MARGIN_MS)
    pipeline = Pipeline(
        [RespondStage(), SynthesiseStage(tts, PCM_16K_60MS, speak_executor), pace_stage], [4, 2, 2]
    )
    reply = frames_of(TextDelta("The weather is "), TextDelta("sunny. Enjoy"))
    await asyncio.wait_for(pipeline.run(reply), 2)
    assert [c[:3] for c in sink.calls] == [
        ("emotion", DEFAULT_EMOTION),
        ("sentence", "The weather is sunny."),
        ("audio", b"\x01" * FRAME_BYTES, 0),
        ("audio", b"\x01" * FRAME_BYTES, 60),
        ("sentence", "Enjoy"),
        ("audio", b"\x02" * FRAME_BYTES, 120),
        ("audio", b"\x02" * 500 + bytes(FRAME_BYTES - 500), 180),  # the padded last frame, at the end
    ]
    assert clock.now == pytest.approx(pacer.playback_end() + DRAIN_MARGIN_MS / 1000)


async def test_a_system_frame_overtakes_the_frames_queued_behind_a_busy_stage():
    release = asyncio.Event()
    seen: list[Frame] = []

    class Slow(Stage):
        name = "slow"

        async def process(self, frame: Frame, push) -> None:
            if isinstance(frame, TextDelta):
                await release.wait()  # a stage busy with data (synthesis of a long sentence)
            await push(frame)

    class Last(Stage):
        name = "last"

        async def process(self, frame: Frame, push) -> None:
            seen.append(frame)

    async def source():
        yield TextDelta("a long sentence")
        yield TextDelta("and another")
        yield EmotionFrame("thinking")

    run = asyncio.ensure_future(Pipeline([Slow(), Last()], [4, 4]).run(source()))
    for _ in range(50):
        if seen:
            break
        await asyncio.sleep(0.01)
    assert seen == [EmotionFrame("thinking")]  # out while the data still waits
    release.set()
    await asyncio.wait_for(run, 2)
    assert seen[1:] == [TextDelta("a long sentence"), TextDelta("and another")]
