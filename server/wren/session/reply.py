"""One spoken reply: `stt`, `tts start`, then the downlink pipeline, and always its `tts stop`.

    agent events ─► respond ─► synthesise ─► pace ─► outbox (bound to this turn)
                 (sentences)  (TTS, encode)  (playback clock)

Every send goes through the outbox's live-turn guard: once the turn is cancelled (abort, barge-in, socket
gone) nothing of it is sent any more, not even a packet that was already synthesised, and the pipeline
ends (`TurnEnded`). The `tts start` / `tts stop` pair is closed in a `finally` on every path. If the user
cut the reply short, the agent's history keeps only what was really spoken.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from shared_protocol import messages
from wren.agent.events import Emotion, TextChunk
from wren.agent.messages import InboundMessage
from wren.pipeline.downlink import DownlinkFormat
from wren.pipeline.frames import EmotionFrame, Frame, Sentence, TextDelta
from wren.pipeline.hold import Hold, HoldAudio
from wren.pipeline.pace import PaceStage, TurnEnded
from wren.pipeline.pacer import PlaybackPacer
from wren.pipeline.phrase_packets import PhrasePackets
from wren.pipeline.respond import RespondStage
from wren.pipeline.stage import Pipeline
from wren.pipeline.synthesise import SynthesiseStage
from wren.pipeline.timing import TimingSink, TurnTiming
from wren.pipeline.tts_scheduler import TtsScheduler
from wren.session.outbox import CURRENT_TURN, Outbox
from wren.session.services import ConnectionClosed

log = logging.getLogger(__name__)

# Bounds of the queues in front of each downlink stage. Overflow policy for all three: the producer waits
# (back-pressure): the agent when synthesis is behind, synthesis when the pacer is far enough ahead.
AGENT_FRAMES = 64  # text deltas and emotions waiting for the sentence splitter
SENTENCES = 16  # sentences waiting for TTS
PACKET_AHEAD_MS = 3000  # encoded audio waiting for the pacer (beyond the pacer's own pre-buffer)


@dataclass(frozen=True)
class TurnRequest:
    user_text: str | None = None  # recognised or typed words: answered by the agent
    prompt_text: str | None = None  # words the session decided to speak (empty-input prompts, timers)
    close_after: bool = False  # give-up: close the connection once this is spoken
    typed: bool = False  # user_text was typed (`listen detect`), not recognised from speech
    heard_at: float | None = None  # time.monotonic() when the person stopped speaking (speech only)
    announcement: bool = False  # spoken unprompted (a timer): bounded on its own, never pushed out


@dataclass
class ReplyContext:
    """What every reply of one session needs; `downlink` is set again at each hello."""

    outbox: Outbox
    device_id: str
    client_id: str | None
    agent: Any  # wren.agent.loop.AgentLoop: begin_turn(msg, device_tools=...)
    device_tools: Callable[[], Any]
    tts: Any  # wren.speech.tts engine
    speak_executor: Executor
    downlink: DownlinkFormat
    prebuffer_frames: int
    drain_margin_ms: int
    on_state: Callable[[ReplyTurn], None]  # speaking started or ended
    on_audio: Callable[[], None]  # outgoing speech is activity (reference §10 row 12)
    timing_sink: TimingSink | None = None  # gets each turn's timing record when the turn ends
    tts_scheduler: TtsScheduler | None = None  # shared by all sessions; None: a private one per turn
    hold_phrase_after_s: float = 0.0  # no answer audio this long: HOLD_PHRASE first (0 = never)
    hold_audio: HoldAudio | None = None  # its packets (shared by all sessions), for a reply held by synthesis
    phrase_packets: PhrasePackets | None = None  # ready packets of cached phrases (shared by all sessions)


class _TurnSink:
    """The pace stage's view of the outbox, bound to one turn."""

    def __init__(self, turn: ReplyTurn) -> None:
        self._turn = turn
        self._outbox = turn.ctx.outbox

    async def emotion(self, name: str) -> bool:
        return await self._outbox.send_for(self._turn.turn_id, messages.llm(self._outbox.session_id, name))

    async def sentence(self, text: str) -> bool:
        msg = messages.tts_sentence_start(self._outbox.session_id, text)
        return await self._outbox.send_for(self._turn.turn_id, msg)

    async def audio(self, packet: bytes, timestamp_ms: int) -> bool:
        if not await self._outbox.send_audio_for(self._turn.turn_id, packet, timestamp_ms):
            return False
        self._turn.ctx.on_audio()
        return True


class ReplyTurn:
    def __init__(self, turn_id: int, request: TurnRequest, ctx: ReplyContext) -> None:
        self.turn_id = turn_id
        self.request = request
        self.ctx = ctx
        self.cancelled = False
        self.spoken: list[str] = []  # sentences whose audio started going out
        self._agent_turn: Any = None  # the agent's turn, once the agent was asked
        self._agent_done = False
        self._hold: Hold | None = None  # this reply's hold phrase, for an answer to a person
        source = "prompt" if request.user_text is None else "text" if request.typed else "speech"
        self.timing = TurnTiming(ctx.device_id, source, turn_id, sink=ctx.timing_sink,
                                 heard=request.user_text or "")

    def __repr__(self) -> str:
        return f"<turn {self.turn_id}{' cancelled' if self.cancelled else ''}>"

    async def run(self) -> None:
        CURRENT_TURN.set(self.turn_id)  # the device MCP sender refuses tool calls once we are not live
        self.timing.mark("started")
        outbox = self.ctx.outbox
        try:
            user_text = self.request.user_text
            if user_text is not None and not await outbox.send_for(
                self.turn_id, messages.stt(outbox.session_id, user_text)
            ):
                return
            self.timing.mark("stt_sent")
            if not await outbox.tts_start(self.turn_id):
                return
            self.ctx.on_state(self)
            await self._speak()
        except asyncio.CancelledError:
            raise
        except (ConnectionClosed, TurnEnded):
            pass
        except Exception:
            log.exception("%s: %s failed; closing it with tts stop", outbox.name, self)
        finally:
            await outbox.tts_stop(self.turn_id, f"{self} finished")  # unless whoever cancelled us sent it
            self.ctx.on_state(self)
            if self._agent_turn is not None and (self.cancelled or not self._agent_done):
                # Cut off (abort, barge-in, failure) even if the text was complete: the history keeps
                # only what the user actually heard.
                await self._interrupt_agent()
            self.timing.said = " ".join(self.spoken)
            self.timing.finish(self.cancelled)

    async def _speak(self) -> None:
        ctx = self.ctx
        fmt = ctx.downlink
        if self.request.user_text is not None and ctx.hold_phrase_after_s > 0:
            # Someone asked and waits: past the bound, with no answer audio yet, they hear HOLD_PHRASE.
            since = self.request.heard_at or time.monotonic()
            self._hold = Hold.after(ctx.hold_phrase_after_s, since, ctx.hold_audio)
        pacer = PlaybackPacer(fmt.frame_ms, ctx.prebuffer_frames)
        pace = PaceStage(_TurnSink(self), pacer, fmt.frame_ms, ctx.drain_margin_ms, self.timing)
        self.spoken = pace.spoken
        # The synthesise stage reads the pacer for its jobs' deadlines (how much audio is queued ahead).
        synthesise = SynthesiseStage(ctx.tts, fmt, ctx.tts_scheduler or ctx.speak_executor, self.timing,
                                     pacer=pacer, name=f"{ctx.device_id}:{self.turn_id}", hold=self._hold,
                                     phrases=ctx.phrase_packets)
        pipeline = Pipeline(
            [RespondStage(self.timing), synthesise, pace],
            [AGENT_FRAMES, SENTENCES, max(16, PACKET_AHEAD_MS // fmt.frame_ms)],
            name=f"{ctx.outbox.name}:{self}",
        )
        source = self._source()
        try:
            await pipeline.run(source)
        finally:
            synthesise.cancel()  # nothing of this turn may keep waiting for a speak worker
            await source.aclose()  # a source cut off at a `yield` is finalised now, not by the GC later

    async def _source(self) -> AsyncIterator[Frame]:
        if self.request.prompt_text is not None:
            yield Sentence(self.request.prompt_text)
            return
        assert self.request.user_text is not None
        ctx = self.ctx
        msg = InboundMessage(
            channel="xiaozhi",
            sender_id=ctx.device_id,
            chat_id=ctx.device_id,
            content=self.request.user_text,
            metadata={"session_id": ctx.outbox.session_id, "client_id": ctx.client_id},
        )
        self._agent_turn = ctx.agent.begin_turn(msg, device_tools=ctx.device_tools())
        turn = self._agent_turn
        events = aiter(turn)
        hold = self._hold  # until the engine's first words: at `hold.at` the hold phrase is said
        while True:
            if hold is not None and not hold.said and not await turn.ready(hold.at - time.monotonic()):
                log.info("%s: %s: no words from the engine by the bound (%.1f s); saying %r first",
                         ctx.outbox.name, self, ctx.hold_phrase_after_s, hold.text)
                yield hold.sentence  # a person hears that they were heard, not silence
                hold = None
            event = await anext(events, None)
            if event is None:
                break
            if isinstance(event, Emotion):
                yield EmotionFrame(event.name)
            elif isinstance(event, TextChunk):
                if event.text.strip():
                    hold = None  # words: from here the synthesise stage knows whether audio is late
                yield TextDelta(event.text)
        self._agent_done = True

    def answer_spoken(self) -> str:
        """What the person heard of the answer itself (the hold phrase is not part of it)."""
        held = self._hold is not None and self._hold.said
        spoken = self.spoken[1:] if held and self.spoken[:1] == [self._hold.text] else self.spoken
        return " ".join(spoken)

    async def _interrupt_agent(self) -> None:
        try:
            await asyncio.shield(self._agent_turn.interrupt(self.answer_spoken()))
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("%s: agent interrupt failed", self)
