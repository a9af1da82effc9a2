"""The synthesise stage: sentences → TTS → the device's rate → exact frames → encoded packets.

Synthesis, resampling and encoding are blocking and run on the speak workers, one TTS chunk per job, so a
long sentence's first packets leave while the rest is still being synthesised. The jobs of all sessions go
through one `TtsScheduler` (wren.pipeline.tts_scheduler), each with a deadline: the reply's first chunk is
due now; every later one when the device's playback reaches it, which this stage knows from the turn's
pacer (audio already sent and still to play) and the packets it made that the pacer has not sent yet.

A `Sentence` is passed on right before the packet holding its first audio (the pacer sends `sentence_start`
with it); a sentence the TTS fails on becomes a `StageError` and the reply goes on with the next one. One
renderer per turn: every reply starts with a fresh Opus encoder (reference §9.3, xinnan #863) and the padded
last frame comes last; a sentence whose audio is in the phrase cache is sent from packets made once
(wren.pipeline.phrase_packets), with a fresh renderer after it.

A reply's `Hold` (wren.pipeline.hold) is kept here, where it is known whether audio is late: while the
first job waits past `hold.at` with no packet made, the hold phrase's ready packets go out first; the
phrase's own `Sentence`, yielded by a silent engine's reply, is said from them without a job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Executor
from typing import Any

from wren.pipeline.downlink import DownlinkFormat, DownlinkRenderer
from wren.pipeline.frames import Frame, Packet, Sentence, StageError
from wren.pipeline.hold import Hold
from wren.pipeline.pacer import PlaybackPacer
from wren.pipeline.phrase_packets import PhrasePackets
from wren.pipeline.stage import Push, Stage
from wren.pipeline.timing import TurnTiming
from wren.pipeline.tts_scheduler import PLAYBACK_LEAD_S, RELEASE_AHEAD_S, TtsScheduler

log = logging.getLogger(__name__)


def _next_packets(chunks: Iterator[bytes], renderer: DownlinkRenderer, timing: TurnTiming | None
                  ) -> tuple[list[bytes], bool]:
    """Executor job: synthesise the next TTS chunk and encode it (packets, finished?)."""
    if timing is not None:
        timing.mark("tts_started")
    pcm = next(chunks, None)
    if pcm is None:
        return [], True
    if timing is not None:
        timing.mark("tts_first_pcm")
    packets = renderer.render(pcm)
    if packets and timing is not None:
        timing.mark("first_packet")
    return packets, False


class SynthesiseStage(Stage):
    name = "synthesise"

    def __init__(self, tts: Any, fmt: DownlinkFormat, scheduler: TtsScheduler | Executor,
                 timing: TurnTiming | None = None, *, pacer: PlaybackPacer | None = None, name: str = "",
                 hold: Hold | None = None, phrases: PhrasePackets | None = None) -> None:
        """`scheduler`: the process's TtsScheduler (a bare executor gets a private one: tests, tools).
        `pacer`: the turn's playback clock, for the deadlines of later chunks; without one every chunk
        is due now (first come, first served, as a plain executor would run them). `hold`: the reply's
        hold phrase, said if its first audio is late (module docstring). `phrases`: the process's ready
        packets of cached phrases (a sentence in the phrase cache is sent from them)."""
        self._tts = tts  # a TtsEngine: sample_rate, synthesize(text) → iterator of PCM chunks
        self._renderer = DownlinkRenderer(tts.sample_rate, fmt)
        self._renderer_used = False  # it has audio of this reply (a partial frame, the resampler's tail)
        self._phrases = phrases
        self._scheduler = scheduler if isinstance(scheduler, TtsScheduler) else TtsScheduler(scheduler, 1)
        self._timing = timing
        self._pacer = pacer
        self._frame_s = fmt.frame_ms / 1000
        self._name = name
        self._fmt = fmt
        self._hold = hold
        self._packets_made = 0
        self._jobs = 0
        # Sentences whose audio has not yet filled a frame: announced right before the packet that holds
        # their first audio (which may be the next sentence's, or the padded last frame at the end).
        self._unannounced: list[Sentence] = []

    async def _push_packets(self, packets: list[bytes], push: Push) -> None:
        if packets:
            for sentence in self._unannounced:
                await push(sentence)
            self._unannounced.clear()
        for packet in packets:
            await push(Packet(packet))
        self._packets_made += len(packets)

    async def process(self, frame: Frame, push: Push) -> None:
        if not isinstance(frame, Sentence):
            await push(frame)
            return
        hold = self._hold
        if hold is not None and frame is hold.sentence:  # a silent engine's reply: the hold phrase now
            if hold.said or await self._say_hold(push):
                return
            hold.said = True  # no packets to say it from: synthesised below, like any sentence
        ready = self._phrases is not None and self._phrases.cached(frame.text)
        if ready and await self._say_ready(frame, push):
            return
        self._unannounced.append(frame)
        self._renderer_used = True
        starts_cached = getattr(self._tts, "starts_cached", None)  # a phrase cache: its first chunk is cheap
        cheap = starts_cached is not None and starts_cached(frame.text)
        try:
            chunks = iter(self._tts.synthesize(frame.text))
            while True:
                packets, done = await self._held_back(
                    self._run(_next_packets, chunks, self._renderer, self._timing, cheap=cheap), push)
                cheap = False
                await self._push_packets(packets, push)
                if done:
                    return
        except Exception as exc:
            log.exception("TTS failed for %r; skipping that sentence", frame.text)
            if frame in self._unannounced:  # nothing of it was heard: never announce it
                self._unannounced.remove(frame)
            await push(StageError(self.name, exc))

    async def flush(self, push: Push) -> None:
        if self._renderer_used:
            await self._push_packets(await self._run(self._renderer.flush), push)

    async def _say_ready(self, frame: Sentence, push: Push) -> bool:
        """Send a cached phrase from its ready packets (made now, on a speak worker, the first time): the
        reply's renderer ends its frame first and starts fresh after it (wren.pipeline.phrase_packets).
        False if there are none after all (the phrase left the cache): synthesise it as usual."""
        phrases = self._phrases
        assert phrases is not None
        packets = phrases.ready(self._fmt, frame.text)
        if self._renderer_used:
            await self._push_packets(await self._run(self._renderer.flush), push)
            self._renderer = DownlinkRenderer(self._tts.sample_rate, self._fmt)
            self._renderer_used = False
        if packets is None:
            try:
                packets = await self._held_back(
                    self._run(phrases.render, self._fmt, frame.text, cheap=True), push)
            except Exception:
                log.exception("rendering the cached phrase %r failed; synthesising it", frame.text)
                return False
        if not packets:
            return False
        if self._timing is not None:
            for stamp in ("tts_started", "tts_first_pcm", "first_packet"):
                self._timing.mark(stamp)
        self._unannounced.append(frame)
        await self._push_packets(list(packets), push)
        return True

    async def _held_back(self, job: Awaitable[Any], push: Push) -> Any:
        """`await job`; but while the reply's first audio is late past `hold.at`, its hold phrase goes out
        first (from ready packets: it needs no worker)."""
        hold = self._hold
        if hold is None or hold.said or self._packets_made or hold.audio is None:
            return await job
        waiting = asyncio.ensure_future(job)
        try:
            done, _ = await asyncio.wait({waiting}, timeout=max(0.0, hold.at - time.monotonic()))
            if not done and not hold.said:
                await self._say_hold(push)
            return await waiting
        finally:
            waiting.cancel()  # only if this turn was cancelled meanwhile: its job must leave the queue

    async def _say_hold(self, push: Push) -> bool:
        """Push the hold phrase's sentence and ready packets; False (nothing pushed) without packets."""
        hold = self._hold
        assert hold is not None
        packets = hold.audio.packets(self._fmt) if hold.audio is not None else None
        if not packets:
            return False
        hold.said = True
        log.info("%s: no reply audio by its bound; saying %r first", self._name, hold.text)
        if self._timing is not None:
            self._timing.mark("hold_sent")
        await push(hold.sentence)
        for packet in packets:
            await push(Packet(packet))
        # Packets the device will play before the answer's: later chunks' deadlines count them.
        self._packets_made += len(packets)
        return True

    def cancel(self) -> None:
        """The turn is over: none of its jobs may still wait for a worker."""
        self._scheduler.cancel_turn(self)

    async def _run(self, fn: Callable[..., Any], *args: Any, cheap: bool = False) -> Any:
        deadline, release = self._due()
        chunk, self._jobs = self._jobs, self._jobs + 1
        return await self._scheduler.run(fn, *args, deadline=deadline, release=release, turn=self,
                                         name=self._name, chunk=chunk, cheap=cheap)

    def _due(self) -> tuple[float, float]:
        """(deadline, release) of the next job: when playback would reach the audio it makes."""
        now = self._scheduler.clock()
        if self._pacer is None or self._packets_made == 0:
            return now, now  # the first words of a reply: someone is waiting for them now
        unsent = self._packets_made - self._pacer.frames_sent  # made, still waiting for the pacer
        plays_at = max(now, self._pacer.playback_end()) + max(0, unsent) * self._frame_s
        deadline = plays_at - PLAYBACK_LEAD_S
        return deadline, deadline - RELEASE_AHEAD_S
