"""The pace stage: packets to the device on its playback clock (reference §9.3), the last stage of a reply.

`sentence_start` goes out right before the sentence's first packet, on the same timeline as its audio, and
the sentence counts as spoken from then on (`spoken`: what the history keeps if the user cuts the reply
short). Emotions go out as they come. At the end it waits until the device has played everything (plus
`drain_margin_ms`), so the `tts stop` that follows cuts nothing off.

It writes through a `DownlinkSink` (the session's outbox, bound to this turn). A sink that refuses (the
turn is no longer the live one: aborted, barged in, socket gone) ends the reply: `TurnEnded`.
"""

from __future__ import annotations

import logging
from typing import Protocol

from wren.pipeline.frames import EmotionFrame, Frame, Packet, Sentence, StageError
from wren.pipeline.pacer import PlaybackPacer
from wren.pipeline.stage import Push, Stage
from wren.pipeline.timing import TurnTiming

log = logging.getLogger(__name__)


class TurnEnded(Exception):
    """The turn is no longer the live one; nothing more of it goes out."""


class DownlinkSink(Protocol):
    """Where one turn's output goes; each call returns False once the turn is no longer live."""

    async def emotion(self, name: str) -> bool: ...

    async def sentence(self, text: str) -> bool: ...

    async def audio(self, packet: bytes, timestamp_ms: int) -> bool: ...


class PaceStage(Stage):
    name = "pace"

    def __init__(self, sink: DownlinkSink, pacer: PlaybackPacer, frame_ms: int, drain_margin_ms: int,
                 timing: TurnTiming | None = None) -> None:
        self._sink = sink
        self._pacer = pacer
        self._frame_ms = frame_ms
        self._drain_margin_ms = drain_margin_ms
        self._timing = timing
        self._pending_sentences: list[str] = []
        self.spoken: list[str] = []  # sentences whose audio started going out
        self.frames_sent = 0

    async def process(self, frame: Frame, push: Push) -> None:
        if isinstance(frame, Packet):
            await self._send_packet(frame.data)
        elif isinstance(frame, Sentence):
            self._pending_sentences.append(frame.text)  # goes out right before its first frame
        elif isinstance(frame, EmotionFrame):
            if not await self._sink.emotion(frame.name):
                raise TurnEnded()
        elif isinstance(frame, StageError):
            log.debug("reply goes on after a %s error: %s", frame.stage, frame.error)

    async def flush(self, push: Push) -> None:
        await self._pacer.wait_drained(self._drain_margin_ms)

    async def _send_packet(self, data: bytes) -> None:
        await self._pacer.wait_for_slot()
        for text in self._pending_sentences:
            if not await self._sink.sentence(text):
                raise TurnEnded()
            self.spoken.append(text)
        self._pending_sentences.clear()
        if not await self._sink.audio(data, self.frames_sent * self._frame_ms):
            raise TurnEnded()
        if self._timing is not None:
            self._timing.mark("first_audio_sent")
        self._pacer.frame_sent()
        self.frames_sent += 1
