"""The hold phrase in the synthesise stage (wren.pipeline.hold): a reply whose first audio is late past its
bound (synthesis waiting for a busy speak worker, or an engine with no words yet) is preceded by "One
moment." from ready packets, which take no synthesis job; a reply in time never is; it is said once.
Real scheduler and threads, no model: the speak worker is held busy by a blocking job."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from wren.pipeline.downlink import DownlinkFormat
from wren.pipeline.frames import Packet, Sentence
from wren.pipeline.hold import HOLD_PHRASE, Hold, HoldAudio
from wren.pipeline.phrase_packets import PhrasePackets
from wren.pipeline.synthesise import SynthesiseStage
from wren.pipeline.timing import TurnTiming
from wren.pipeline.tts_scheduler import TtsScheduler

from tests.pipeline.test_tts_scheduler import Blocker, Collect, eventually

PCM_16K_60MS = DownlinkFormat("pcm", 16000, 60)
FRAME_BYTES = 16000 * 60 // 1000 * 2
HOLD_FRAMES = 5
ANSWER_FRAMES = 3


class CachedVoice:
    """A TTS whose phrase cache holds the hold phrase (unless told not to); other text is 3 frames of 1s."""

    sample_rate = 16000

    def __init__(self, hold_cached: bool = True) -> None:
        self.audio = {HOLD_PHRASE: b"\x02" * FRAME_BYTES * HOLD_FRAMES} if hold_cached else {}
        self.synthesized: list[str] = []

    def cached(self, text: str) -> bool:
        return text in self.audio

    def synthesize(self, text: str):
        self.synthesized.append(text)
        yield self.audio.get(text, b"\x01" * FRAME_BYTES * ANSWER_FRAMES)


@pytest.fixture
def pool():
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-speak")
    yield executor
    executor.shutdown(wait=True)


def texts(frames: list) -> list[str]:
    """The frames pushed, as sentences and the first byte of each packet: ["One moment.", "2", ...]."""
    return [f.text if isinstance(f, Sentence) else str(f.data[0]) for f in frames
            if isinstance(f, Sentence | Packet)]


def hold_in(seconds: float, voice: CachedVoice) -> Hold:
    return Hold(time.monotonic() + seconds, HoldAudio(PhrasePackets(voice)))


class Rig:
    """One reply's synthesise stage with its hold due in `seconds`, on a scheduler with one speak worker."""

    def __init__(self, pool: ThreadPoolExecutor, seconds: float, voice: CachedVoice | None = None,
                 timing: TurnTiming | None = None, scheduler: TtsScheduler | None = None, name: str = "a"
                 ) -> None:
        self.scheduler = scheduler or TtsScheduler(pool, workers=1)
        self.voice = voice or CachedVoice()
        self.hold = hold_in(seconds, self.voice)
        self.synth = SynthesiseStage(self.voice, PCM_16K_60MS, self.scheduler, timing, name=name,
                                     hold=self.hold)
        self.push = Collect()
        self._busy: tuple[Blocker, asyncio.Future] | None = None

    def occupy_the_worker(self) -> None:
        """Another device's synthesis takes the one speak worker until `free_the_worker()`."""
        blocker = Blocker()
        self._busy = (blocker, asyncio.ensure_future(self.scheduler.run(blocker, deadline=0.0)))

    async def free_the_worker(self) -> None:
        assert self._busy is not None
        self._busy[0].release()
        await self._busy[1]

    def speak(self, text: str) -> asyncio.Future:
        return asyncio.ensure_future(self.synth.process(Sentence(text), self.push))


async def test_a_first_chunk_still_waiting_at_the_bound_is_preceded_by_the_hold_phrase(pool) -> None:
    timing = TurnTiming("dev", "speech")
    timing.mark("input_end")
    rig = Rig(pool, 0.15, timing=timing)
    rig.occupy_the_worker()  # every speak worker busy with another device's synthesis
    asked = time.monotonic()
    answer = rig.speak("Answer.")

    await eventually(lambda: rig.push.frames)
    assert 0.1 <= time.monotonic() - asked < 1.0
    assert texts(rig.push.frames) == [HOLD_PHRASE] + ["2"] * HOLD_FRAMES  # the answer is still waiting
    assert rig.hold.said and not answer.done()

    await rig.free_the_worker()
    await asyncio.wait_for(answer, 5)
    assert texts(rig.push.frames) == [HOLD_PHRASE] + ["2"] * HOLD_FRAMES + ["Answer."] + ["1"] * ANSWER_FRAMES
    # The hold phrase's packets came from the cache on the loop (rendered once), not from a synthesis job.
    assert rig.voice.synthesized == [HOLD_PHRASE, "Answer."]
    assert [started.turn for started in rig.scheduler.trace] == ["", "a", "a"]  # the answer: chunk, end
    assert timing.split_ms()["input_end_to_hold"] is not None


async def test_an_answer_made_in_time_is_never_held(pool) -> None:
    rig = Rig(pool, 0.3)
    await asyncio.wait_for(rig.speak("Answer."), 5)
    await asyncio.sleep(0.4)  # past the bound: the answer's audio came first, so nothing more is said
    await rig.speak("More.")
    assert texts(rig.push.frames) == ["Answer."] + ["1"] * ANSWER_FRAMES + ["More."] + ["1"] * ANSWER_FRAMES
    assert not rig.hold.said


async def test_a_silent_engines_hold_sentence_is_said_from_ready_packets_and_only_once(pool) -> None:
    rig = Rig(pool, 0.0)
    await rig.synth.process(rig.hold.sentence, rig.push)  # what the reply's source yields at the bound
    assert texts(rig.push.frames) == [HOLD_PHRASE] + ["2"] * HOLD_FRAMES
    assert not rig.scheduler.trace and rig.voice.synthesized == [HOLD_PHRASE]  # from the cache, no job
    rig.occupy_the_worker()  # the answer is late as well: it is not held a second time
    answer = rig.speak("Answer.")
    await asyncio.sleep(0.3)
    assert len(texts(rig.push.frames)) == 1 + HOLD_FRAMES
    await rig.free_the_worker()
    await asyncio.wait_for(answer, 5)
    assert texts(rig.push.frames)[1 + HOLD_FRAMES:] == ["Answer."] + ["1"] * ANSWER_FRAMES


async def test_without_the_phrase_in_the_cache_a_late_answer_is_not_held_and_a_silent_engines_is_synthesised(
    pool,
) -> None:
    voice = CachedVoice(hold_cached=False)
    rig = Rig(pool, 0.05, voice)
    rig.occupy_the_worker()
    answer = rig.speak("Answer.")
    await asyncio.sleep(0.25)
    assert rig.push.frames == [] and not rig.hold.said  # no packets to say it from: synthesis would wait too
    await rig.free_the_worker()
    await asyncio.wait_for(answer, 5)

    silent = Rig(pool, 0.0, voice, scheduler=rig.scheduler, name="b")
    await silent.synth.process(silent.hold.sentence, silent.push)
    assert texts(silent.push.frames) == [HOLD_PHRASE] + ["1"] * ANSWER_FRAMES  # synthesised like any sentence
    assert silent.hold.said and voice.synthesized[-1] == HOLD_PHRASE


async def test_a_reply_cancelled_while_held_leaves_no_synthesis_job_waiting(pool) -> None:
    rig = Rig(pool, 0.05)
    rig.occupy_the_worker()
    answer = rig.speak("Answer.")
    await eventually(lambda: rig.hold.said)
    assert rig.scheduler.waiting == 1
    answer.cancel()  # the person pressed the button during "One moment."
    with pytest.raises(asyncio.CancelledError):
        await answer
    assert rig.scheduler.waiting == 0
    await rig.free_the_worker()
    assert "Answer." not in rig.voice.synthesized and len(rig.scheduler.trace) == 1  # only the other device's


def test_the_hold_phrases_packets_are_rendered_once_per_downlink_format_as_a_ready_phrase() -> None:
    voice = CachedVoice()
    phrases = PhrasePackets(voice)
    audio = HoldAudio(phrases)
    first = audio.packets(PCM_16K_60MS)
    assert first is not None and len(first) == HOLD_FRAMES
    assert audio.packets(PCM_16K_60MS) is first and voice.synthesized == [HOLD_PHRASE]
    opus = audio.packets(DownlinkFormat("opus", 24000, 60))  # resampled and encoded: 0.3 s in 60 ms packets
    assert opus is not None and len(opus) == 5 and voice.synthesized == [HOLD_PHRASE] * 2
    # One store for every ready phrase (its bound and eviction: tests/pipeline/test_phrase_packets.py): a
    # reply that begins with "One moment." sends the same packets.
    assert phrases.ready(PCM_16K_60MS, HOLD_PHRASE) is first and phrases.rendered == 2
    assert HoldAudio(PhrasePackets(CachedVoice(hold_cached=False))).packets(PCM_16K_60MS) is None


def test_a_hold_is_due_at_its_bound_after_the_end_of_speech_and_never_within_the_grace() -> None:
    audio = HoldAudio(PhrasePackets(CachedVoice()))
    assert Hold.after(1.5, since=100.0, audio=audio, now=100.2).at == pytest.approx(101.5)
    late = Hold.after(1.5, since=100.0, audio=audio, now=103.0)  # the words came late
    assert late.at == pytest.approx(103.25) and late.text == HOLD_PHRASE


def test_the_bound_counts_from_when_the_person_stopped_speaking() -> None:
    from wren.config import VadConfig
    from wren.pipeline.frames import InputEnd, Utterance
    from wren.pipeline.timing import UplinkTiming
    from wren.session.listening import Listener

    listener = Listener(None, VadConfig(silence_ms=500), None, UplinkTiming("a"), "a")  # type: ignore[arg-type]

    def ended(reason: InputEnd) -> Utterance:
        return Utterance("hello", True, 1200, reason, ended_at=10.0, decoded_at=10.05)

    # The VAD ended the turn after 500 ms of silence: the words ended that long before.
    assert listener.speech_ended_at(ended(InputEnd.SILENCE)) == pytest.approx(9.5)
    assert listener.speech_ended_at(ended(InputEnd.LISTEN_STOP)) == pytest.approx(10.0)
