"""The TTS scheduler alone and with the synthesise stage: earliest deadline first, later sentences released
just in time against the turn's pacer, cancellation, the bound. No socket and no model: jobs are small
functions on a real thread pool, times come from a fake clock, and the scheduler is poked when it moves."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from wren.pipeline.downlink import DownlinkFormat
from wren.pipeline.frames import Packet, Sentence, StageError
from wren.pipeline.pacer import PlaybackPacer
from wren.pipeline.synthesise import SynthesiseStage
from wren.pipeline.tts_scheduler import PLAYBACK_LEAD_S, RELEASE_AHEAD_S, TtsOverloaded, TtsScheduler

from tests.support.clock import FakeClock

PCM_16K_60MS = DownlinkFormat("pcm", 16000, 60)
FRAME_BYTES = 16000 * 60 // 1000 * 2
# A sentence this many 60 ms frames long puts the next chunk 0.6 s past its release: it is held.
HELD = round((PLAYBACK_LEAD_S + RELEASE_AHEAD_S + 0.6) / 0.06)


@pytest.fixture
def pool():
    executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="test-speak")
    yield executor
    executor.shutdown(wait=True)


async def eventually(check, timeout: float = 2.0) -> None:
    for _ in range(int(timeout / 0.005)):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not met in time")


class Blocker:
    """A job that holds its worker until `release()`."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self) -> str:
        assert self.event.wait(5)
        return "blocker"

    def release(self) -> None:
        self.event.set()


async def play_on(clock: FakeClock, scheduler: TtsScheduler, task: asyncio.Future) -> None:
    """Let time pass (0.5 s a step) until `task` is done: held jobs are released as their time comes."""
    for _ in range(200):
        if task.done():
            break
        clock.now += 0.5
        scheduler.poke()
        await asyncio.sleep(0.01)
    await asyncio.wait_for(task, 1)


def names(scheduler: TtsScheduler) -> list[str]:
    return [job.turn for job in scheduler.trace]


async def one_busy_worker(pool) -> tuple[FakeClock, TtsScheduler, Blocker, asyncio.Future]:
    """A scheduler on a fake clock whose one speak worker is held by a "blocker" job until released."""
    clock = FakeClock()
    scheduler = TtsScheduler(pool, workers=1, clock=clock)
    blocker = Blocker()
    busy = asyncio.ensure_future(scheduler.run(blocker, deadline=clock.now, name="blocker"))
    await eventually(lambda: scheduler.running == 1)
    return clock, scheduler, blocker, busy


# ---- the scheduler ----------------------------------------------------------------------------------


async def test_waiting_jobs_run_earliest_deadline_first_whatever_their_arrival(pool):
    clock, scheduler, blocker, busy = await one_busy_worker(pool)
    ran: list[str] = []
    jobs = [asyncio.ensure_future(scheduler.run(ran.append, name, deadline=clock.now + due, name=name))
            for name, due in (("late", 3.0), ("urgent", -1.0), ("soon", 1.0), ("soon too", 1.0))]
    await eventually(lambda: scheduler.waiting == 4)
    blocker.release()
    await asyncio.wait_for(asyncio.gather(busy, *jobs), 2)
    assert ran == ["urgent", "soon", "soon too", "late"]  # equal deadlines: first submitted first
    assert names(scheduler) == ["blocker", "urgent", "soon", "soon too", "late"]


async def test_a_cheap_job_goes_ahead_of_due_synthesis_but_is_released_no_earlier(pool):
    clock, scheduler, blocker, busy = await one_busy_worker(pool)
    ran: list[str] = []
    jobs = [asyncio.ensure_future(scheduler.run(ran.append, name, deadline=clock.now + due, name=name,
                                                cheap=cheap))
            for name, due, cheap in (("synthesis due", -1.0, False), ("cached phrase", 0.0, True),
                                     ("synthesis", 0.0, False))]
    # A cheap job due later is held until its own release, however early its place in the queue.
    held = asyncio.ensure_future(scheduler.run(ran.append, "cached later", deadline=clock.now + 3,
                                               release=clock.now + 2, name="cached later", cheap=True))
    await eventually(lambda: scheduler.waiting == 4)
    blocker.release()
    await asyncio.wait_for(asyncio.gather(busy, *jobs), 2)
    assert ran == ["cached phrase", "synthesis due", "synthesis"]
    started = {job.turn: job for job in scheduler.trace}
    assert started["cached phrase"].deadline == clock.now  # its place moved, not its deadline (the trace)
    assert not held.done()
    clock.now += 2
    scheduler.poke()
    await asyncio.wait_for(held, 2)


async def test_no_more_jobs_run_at_once_than_there_are_workers(pool):
    scheduler = TtsScheduler(pool, workers=2)
    blockers = [Blocker() for _ in range(3)]
    jobs = [asyncio.ensure_future(scheduler.run(b, deadline=0.0)) for b in blockers]
    await eventually(lambda: scheduler.running == 2)
    assert scheduler.waiting == 1
    for b in blockers:
        b.release()
    assert await asyncio.wait_for(asyncio.gather(*jobs), 2) == ["blocker"] * 3
    assert scheduler.running == 0 and scheduler.waiting == 0


async def test_a_job_is_held_until_its_release_time_even_with_idle_workers(pool):
    clock = FakeClock()
    scheduler = TtsScheduler(pool, workers=2, clock=clock)
    job = asyncio.ensure_future(scheduler.run(lambda: "ran", deadline=clock.now + 3, release=clock.now + 2))
    await asyncio.sleep(0.05)
    assert not job.done() and scheduler.running == 0 and scheduler.waiting == 1
    clock.now += 1.9
    scheduler.poke()
    await asyncio.sleep(0.05)
    assert not job.done()
    clock.now += 0.1
    scheduler.poke()
    assert await asyncio.wait_for(job, 2) == "ran"


async def test_the_release_timer_starts_a_held_job_on_the_real_clock(pool):
    scheduler = TtsScheduler(pool, workers=1)
    now = scheduler.clock()
    job = scheduler.run(lambda: "ran", deadline=now + 0.1, release=now + 0.05)
    assert await asyncio.wait_for(job, 2) == "ran"
    assert scheduler.trace[-1].started >= now + 0.05


async def test_a_cancelled_waiter_never_takes_a_worker(pool):
    scheduler = TtsScheduler(pool, workers=1)
    blocker = Blocker()
    busy = asyncio.ensure_future(scheduler.run(blocker, deadline=0.0))
    await eventually(lambda: scheduler.running == 1)
    ran: list[str] = []
    victim = asyncio.ensure_future(scheduler.run(ran.append, "cut off", deadline=1.0, name="cut off"))
    kept = asyncio.ensure_future(scheduler.run(ran.append, "kept", deadline=2.0, name="kept"))
    await eventually(lambda: scheduler.waiting == 2)
    victim.cancel()  # the turn's pipeline is cancelled (abort, barge-in)
    await asyncio.sleep(0)
    assert scheduler.waiting == 1
    blocker.release()
    await asyncio.wait_for(asyncio.gather(busy, kept), 2)
    assert ran == ["kept"] and "cut off" not in names(scheduler)


async def test_cancel_turn_drops_every_waiting_job_of_that_turn_only(pool):
    scheduler = TtsScheduler(pool, workers=1)
    blocker = Blocker()
    busy = asyncio.ensure_future(scheduler.run(blocker, deadline=0.0))
    await eventually(lambda: scheduler.running == 1)
    a, b = object(), object()
    ran: list[str] = []
    of_a = [asyncio.ensure_future(scheduler.run(ran.append, f"a{i}", deadline=i, turn=a)) for i in range(3)]
    of_b = asyncio.ensure_future(scheduler.run(ran.append, "b", deadline=5.0, turn=b))
    await eventually(lambda: scheduler.waiting == 4)
    assert scheduler.cancel_turn(a) == 3
    assert scheduler.waiting == 1
    blocker.release()
    await asyncio.wait_for(asyncio.gather(busy, of_b), 2)
    assert ran == ["b"] and all(job.cancelled() for job in of_a)


async def test_past_the_bound_the_least_urgent_job_is_refused(pool):
    scheduler = TtsScheduler(pool, workers=1, max_jobs=2)
    blocker = Blocker()
    busy = asyncio.ensure_future(scheduler.run(blocker, deadline=0.0))
    await eventually(lambda: scheduler.running == 1)
    late = asyncio.ensure_future(scheduler.run(lambda: "late", deadline=9.0))
    soon = asyncio.ensure_future(scheduler.run(lambda: "soon", deadline=2.0))
    await eventually(lambda: scheduler.waiting == 2)
    urgent = asyncio.ensure_future(scheduler.run(lambda: "urgent", deadline=1.0))  # full: "late" goes
    later = asyncio.ensure_future(scheduler.run(lambda: "later", deadline=10.0))  # full: itself refused
    await asyncio.sleep(0)
    assert scheduler.waiting == 2 and scheduler.refused == 2
    blocker.release()
    assert await asyncio.wait_for(asyncio.gather(soon, urgent), 2) == ["soon", "urgent"]
    for refused in (late, later):
        with pytest.raises(TtsOverloaded):
            await refused
    await busy


async def test_a_failing_job_raises_in_its_waiter_and_the_next_still_runs(pool):
    scheduler = TtsScheduler(pool, workers=1)

    def boom() -> None:
        raise RuntimeError("piper broke")

    with pytest.raises(RuntimeError, match="piper broke"):
        await scheduler.run(boom, deadline=0.0)
    assert await scheduler.run(lambda: "fine", deadline=0.0) == "fine"
    assert scheduler.running == 0


# ---- with the synthesise stage: deadlines from the turn's pacer ----------------------------------------


class ScriptedTts:
    name, sample_rate = "scripted", 16000

    def __init__(self, frames: dict[str, int]) -> None:
        self.frames = frames

    def synthesize(self, text: str):
        yield b"\x01" * FRAME_BYTES * self.frames[text]


class Collect:
    def __init__(self) -> None:
        self.frames: list = []

    async def __call__(self, frame) -> None:
        self.frames.append(frame)


def stage(scheduler: TtsScheduler, tts: ScriptedTts, clock: FakeClock, name: str
          ) -> tuple[SynthesiseStage, PlaybackPacer]:
    pacer = PlaybackPacer(60, 2, clock=clock, sleep=clock.sleep)
    return SynthesiseStage(tts, PCM_16K_60MS, scheduler, pacer=pacer, name=name), pacer


async def test_the_first_chunk_is_due_now_and_later_ones_just_before_playback_reaches_them(pool):
    clock = FakeClock()
    scheduler = TtsScheduler(pool, workers=2, clock=clock)
    synth, pacer = stage(scheduler, ScriptedTts({"First.": HELD, "Second.": 10}), clock, "a")
    push = Collect()
    first = asyncio.ensure_future(synth.process(Sentence("First."), push))
    await eventually(lambda: len(scheduler.trace) == 1 and scheduler.waiting == 1)
    assert (scheduler.trace[0].chunk, scheduler.trace[0].deadline) == (0, 100.0)  # someone waits: now
    # HELD frames made, none sent: the next chunk plays once they have played. Due PLAYBACK_LEAD_S before
    # that, released RELEASE_AHEAD_S before it is due; until then it waits though both workers are idle.
    plays_at = 100.0 + HELD * 0.06
    release = plays_at - PLAYBACK_LEAD_S - RELEASE_AHEAD_S
    clock.now = release - 0.01
    scheduler.poke()
    await asyncio.sleep(0.05)
    assert not first.done() and scheduler.running == 0
    clock.now = release + 1e-9
    scheduler.poke()
    await asyncio.wait_for(first, 2)
    assert scheduler.trace[1].deadline == pytest.approx(plays_at - PLAYBACK_LEAD_S)
    # The pacer sends 10 frames (its pre-buffer at once, then one per 60 ms of the fake clock): what is
    # queued ahead is now the 10 sent (until playback_end()) and the rest made but not sent.
    for _ in range(10):
        await pacer.wait_for_slot()
        pacer.frame_sent()
    plays_at = pacer.playback_end() + (HELD - 10) * 0.06
    second = asyncio.ensure_future(synth.process(Sentence("Second."), push))
    await asyncio.sleep(0.05)
    assert not second.done() and scheduler.waiting == 1
    clock.now = plays_at - PLAYBACK_LEAD_S - RELEASE_AHEAD_S + 1e-9
    scheduler.poke()
    await eventually(lambda: len(scheduler.trace) == 3)
    assert scheduler.trace[2].deadline == pytest.approx(plays_at - PLAYBACK_LEAD_S)
    await play_on(clock, scheduler, second)
    assert sum(isinstance(f, Packet) for f in push.frames) == HELD + 10


async def test_another_devices_first_clause_does_not_wait_behind_a_long_replys_later_sentences(pool):
    clock = FakeClock()
    scheduler = TtsScheduler(pool, workers=1, clock=clock)
    long_reply, _ = stage(scheduler, ScriptedTts({"One.": HELD, "Two.": HELD, "Three.": HELD}), clock, "A")

    async def speak_a() -> None:
        for text in ("One.", "Two.", "Three."):
            await long_reply.process(Sentence(text), Collect())

    a = asyncio.ensure_future(speak_a())
    # "One." is far ahead of A's playback: the next chunk of A is held
    await eventually(lambda: len(scheduler.trace) == 1 and scheduler.waiting == 1)
    other, _ = stage(scheduler, ScriptedTts({"Hi there.": 5}), clock, "B")
    await asyncio.wait_for(other.process(Sentence("Hi there."), Collect()), 2)
    await play_on(clock, scheduler, a)  # the rest of A's reply is released as its playback nears it
    order = [(job.turn, job.chunk) for job in scheduler.trace]
    assert order[:3] == [("A", 0), ("B", 0), ("B", 1)]
    assert [turn for turn, _ in order[3:]] == ["A"] * 5


async def test_a_turn_cut_off_leaves_no_job_waiting(pool):
    clock = FakeClock()
    scheduler = TtsScheduler(pool, workers=1, clock=clock)
    synth, _ = stage(scheduler, ScriptedTts({"One.": HELD}), clock, "A")
    held = asyncio.ensure_future(synth.process(Sentence("One."), Collect()))
    await eventually(lambda: len(scheduler.trace) == 1 and scheduler.waiting == 1)
    held.cancel()  # the turn's pipeline is cancelled (abort, barge-in)
    with pytest.raises(asyncio.CancelledError):
        await held
    assert scheduler.waiting == 0
    clock.now += 60.0
    scheduler.poke()
    await asyncio.sleep(0.05)
    assert len(scheduler.trace) == 1  # the dropped job never ran
    synth.cancel()


async def test_refused_synthesis_costs_that_sentence_only(pool):
    scheduler = TtsScheduler(pool, workers=1, max_jobs=1)
    blocker = Blocker()
    busy = asyncio.ensure_future(scheduler.run(blocker, deadline=-10.0))
    await eventually(lambda: scheduler.running == 1)
    filler = asyncio.ensure_future(scheduler.run(lambda: None, deadline=-5.0))  # the one place taken
    await eventually(lambda: scheduler.waiting == 1)
    synth = SynthesiseStage(ScriptedTts({"One.": 1}), PCM_16K_60MS, scheduler)
    push = Collect()
    await synth.process(Sentence("One."), push)  # due now, later than the filler: refused
    assert [type(f) for f in push.frames] == [StageError]
    assert isinstance(push.frames[0].error, TtsOverloaded)
    blocker.release()
    await asyncio.gather(busy, filler)


async def test_a_reply_that_begins_with_a_cached_phrase_starts_ahead_of_others_waiting_for_synthesis(pool):
    from wren.speech.tts.phrase_cache import PhraseCache

    tts = PhraseCache(ScriptedTts({"Okay.": 2, "A long answer.": 2}))
    tts.warm(["Okay."])
    clock, scheduler, blocker, busy = await one_busy_worker(pool)
    first, _ = stage(scheduler, tts, clock, "first")
    cached, _ = stage(scheduler, tts, clock, "cached")
    waiting = asyncio.ensure_future(first.process(Sentence("A long answer."), Collect()))
    await eventually(lambda: scheduler.waiting == 1)
    clock.now += 0.5  # asked later than the first device
    quick = asyncio.ensure_future(cached.process(Sentence("Okay."), Collect()))
    await eventually(lambda: scheduler.waiting == 2)
    blocker.release()
    await asyncio.wait_for(asyncio.gather(busy, waiting, quick), 2)
    assert names(scheduler)[:3] == ["blocker", "cached", "first"]
