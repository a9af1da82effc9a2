"""Ready packets of cached phrases (wren.pipeline.phrase_packets): a sentence whose audio is in the phrase
cache is resampled and encoded once per downlink format, and every later reply sends those packets; the
reply's own renderer ends its frame before such a phrase and starts fresh after it. Real scheduler,
threads and (for Opus) libopus; the voice is a stand-in phrase cache."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from wren.pipeline.downlink import DownlinkFormat
from wren.pipeline.frames import Packet, Sentence
from wren.pipeline.phrase_packets import PhrasePackets, render_phrase
from wren.pipeline.synthesise import SynthesiseStage
from wren.pipeline.timing import TurnTiming
from wren.pipeline.tts_scheduler import TtsScheduler

from tests.pipeline.test_tts_scheduler import Collect

PCM_16K_60MS = DownlinkFormat("pcm", 16000, 60)
OPUS_24K_60MS = DownlinkFormat("opus", 24000, 60)
FRAME_BYTES = 16000 * 60 // 1000 * 2
CACHED = "You're welcome."


class CachedVoice:
    """A phrase cache holding CACHED (2.5 frames of 2s); other text is synthesised: 1.5 frames of 1s."""

    sample_rate = 16000

    def __init__(self) -> None:
        self.audio = {CACHED: b"\x02" * (FRAME_BYTES * 5 // 2)}
        self.synthesized: list[str] = []

    def cached(self, text: str) -> bool:
        return text in self.audio

    def synthesize(self, text: str):
        if text not in self.audio:
            self.synthesized.append(text)
        yield self.audio.get(text, b"\x01" * (FRAME_BYTES * 3 // 2))


@pytest.fixture
def scheduler():
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-speak")
    yield TtsScheduler(executor, workers=1)
    executor.shutdown(wait=True)


async def say(scheduler: TtsScheduler, voice: CachedVoice, phrases: PhrasePackets | None, *sentences: str,
              fmt: DownlinkFormat = PCM_16K_60MS, timing: TurnTiming | None = None) -> list:
    """One reply through a synthesise stage: the frames it pushed, its end included."""
    synth = SynthesiseStage(voice, fmt, scheduler, timing, phrases=phrases)
    push = Collect()
    for text in sentences:
        await synth.process(Sentence(text), push)
    await synth.flush(push)
    return push.frames


def shape(frames: list) -> list[str]:
    """Sentences by text, packets by their first byte and whether they end in padding: "1", "1+0"."""
    out = []
    for f in frames:
        if isinstance(f, Sentence):
            out.append(f.text)
        elif isinstance(f, Packet):
            out.append(str(f.data[0]) + ("+0" if f.data[-1] == 0 else ""))
    return out


async def test_a_cached_phrase_is_encoded_once_and_every_later_reply_sends_the_same_packets(scheduler):
    voice = CachedVoice()
    phrases = PhrasePackets(voice)
    first = await say(scheduler, voice, phrases, CACHED, fmt=OPUS_24K_60MS)
    again = await say(scheduler, voice, phrases, CACHED, fmt=OPUS_24K_60MS)
    packets = [f.data for f in first if isinstance(f, Packet)]
    assert packets == [f.data for f in again if isinstance(f, Packet)]
    assert tuple(packets) == render_phrase(voice, OPUS_24K_60MS, CACHED)  # a fresh renderer's, padded
    assert phrases.rendered == 1 and phrases.used == 2
    assert voice.synthesized == []


async def test_the_sentence_before_a_cached_phrase_ends_its_frame_and_the_one_after_starts_fresh(scheduler):
    voice = CachedVoice()
    frames = await say(scheduler, voice, PhrasePackets(voice), "Before.", CACHED, "After.")
    # "Before." is 1.5 frames: its half frame is padded before the phrase's packets, which end padded too;
    # "After." starts on a frame of its own, and the reply's end pads its half frame.
    assert shape(frames) == ["Before.", "1", "1+0", CACHED, "2", "2", "2+0", "After.", "1", "1+0"]
    assert voice.synthesized == ["Before.", "After."]


async def test_without_ready_packets_a_reply_is_rendered_as_one_stream(scheduler):
    voice = CachedVoice()
    frames = await say(scheduler, voice, None, "Before.", CACHED)
    assert shape(frames) == ["Before.", "1", CACHED, "1", "2", "2"]  # 1.5 + 2.5 frames: four, no padding


async def test_a_reply_sent_from_ready_packets_has_its_first_audio_stamps(scheduler):
    voice = CachedVoice()
    timing = TurnTiming("dev", "speech")
    await say(scheduler, voice, PhrasePackets(voice), CACHED, timing=timing)
    assert {"tts_started", "tts_first_pcm", "first_packet"} <= set(timing.stamps)


def test_the_packets_kept_are_bounded_and_the_least_recently_used_phrase_goes_first():
    voice = CachedVoice()
    voice.audio = {f"Phrase {i}.": bytes([i + 1]) * FRAME_BYTES for i in range(3)}
    one_phrase = len(b"".join(render_phrase(voice, PCM_16K_60MS, "Phrase 0.")))
    phrases = PhrasePackets(voice, max_bytes=2 * one_phrase)
    for text in ("Phrase 0.", "Phrase 1.", "Phrase 0.", "Phrase 2."):
        phrases.render(PCM_16K_60MS, text)
    assert phrases.ready(PCM_16K_60MS, "Phrase 0.") and phrases.ready(PCM_16K_60MS, "Phrase 2.")
    assert phrases.ready(PCM_16K_60MS, "Phrase 1.") is None
    assert phrases.render(PCM_16K_60MS, "Not cached.") is None  # nothing to make it from
