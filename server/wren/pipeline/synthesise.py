"""The synthesise stage: sentences → TTS → the device's rate → exact frames → encoded packets.

Synthesis, resampling and encoding are blocking and run in the speak executor, one TTS chunk per job, so a
long sentence's first packets leave while the rest is still being synthesised. A `Sentence` is passed on
right before the packet holding its first audio (the pacer sends `sentence_start` with it); a sentence the
TTS fails on becomes a `StageError` and the reply goes on with the next one. One renderer per turn: every
reply starts with a fresh Opus encoder (reference §9.3, xinnan #863) and the padded last frame comes last.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from concurrent.futures import Executor
from typing import Any

from wren.pipeline.downlink import DownlinkFormat, DownlinkRenderer
from wren.pipeline.frames import Frame, Packet, Sentence, StageError
from wren.pipeline.stage import Push, Stage
from wren.pipeline.timing import TurnTiming

log = logging.getLogger(__name__)


def _next_packets(chunks: Iterator[bytes], renderer: DownlinkRenderer, timing: TurnTiming | None
                  ) -> tuple[list[bytes], bool]:
    """Executor job: synthesise the next TTS chunk and encode it (packets, finished?)."""
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

    def __init__(self, tts: Any, fmt: DownlinkFormat, executor: Executor, timing: TurnTiming | None = None
                 ) -> None:
        self._tts = tts  # a TtsEngine: sample_rate, synthesize(text) → iterator of PCM chunks
        self._renderer = DownlinkRenderer(tts.sample_rate, fmt)
        self._executor = executor
        self._timing = timing
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

    async def process(self, frame: Frame, push: Push) -> None:
        if not isinstance(frame, Sentence):
            await push(frame)
            return
        loop = asyncio.get_running_loop()
        self._unannounced.append(frame)
        try:
            chunks = iter(self._tts.synthesize(frame.text))
            while True:
                packets, done = await loop.run_in_executor(
                    self._executor, _next_packets, chunks, self._renderer, self._timing
                )
                await self._push_packets(packets, push)
                if done:
                    return
        except Exception as exc:
            log.exception("TTS failed for %r; skipping that sentence", frame.text)
            if frame in self._unannounced:  # nothing of it was heard: never announce it
                self._unannounced.remove(frame)
            await push(StageError(self.name, exc))

    async def flush(self, push: Push) -> None:
        loop = asyncio.get_running_loop()
        await self._push_packets(await loop.run_in_executor(self._executor, self._renderer.flush), push)
