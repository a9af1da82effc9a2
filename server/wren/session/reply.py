"""One spoken reply: `stt`, `tts start`, `llm`, then per sentence `sentence_start` + paced audio, `tts stop`.

Three stages run concurrently so the first clause plays while the rest is still being generated:

    agent events ──► SentenceSplitter ──► sentences queue ──► TTS (speak executor) → resample → encode
                                                               ──► frames queue ──► pacer ──► socket

Every send goes through the session's turn guard (`DeviceSession.send_for`): once the turn is
cancelled (abort, barge-in, socket gone) nothing of it is sent any more, not even a frame that was
already synthesised. The `tts start` / `tts stop` pair is closed in a `finally` on every path.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shared_protocol import messages
from wren.agent.events import Emotion, TextChunk
from wren.agent.messages import InboundMessage
from wren.session.downlink import DownlinkRenderer
from wren.session.pacer import PlaybackPacer
from wren.session.services import ConnectionClosed
from wren.session.timing import TurnTiming
from wren.speech.sentences import SentenceSplitter

if TYPE_CHECKING:
    from wren.session.device_session import DeviceSession

log = logging.getLogger(__name__)

# The reply turn whose task (and the agent/tool tasks it spawns) is running: lets the device MCP
# sender refuse a tool call made on behalf of a turn that has been cancelled meanwhile.
CURRENT_TURN: contextvars.ContextVar[ReplyTurn | None] = contextvars.ContextVar("wren_turn", default=None)

DEFAULT_EMOTION = "neutral"


@dataclass(frozen=True)
class TurnRequest:
    user_text: str | None = None  # recognised or typed words: answered by the agent
    prompt_text: str | None = None  # words the session decided to speak (empty-input prompts)
    close_after: bool = False  # give-up: close the connection once this is spoken


def _next_packets(chunks: Any, renderer: DownlinkRenderer, timing: TurnTiming) -> tuple[list[bytes], bool]:
    """Executor job: synthesise the next TTS chunk and encode it (packets, finished?)."""
    pcm = next(chunks, None)
    if pcm is None:
        return [], True
    timing.mark("tts_first_pcm")
    packets = renderer.render(pcm)
    if packets:
        timing.mark("first_packet")
    return packets, False


class ReplyTurn:
    def __init__(self, turn_id: int, request: TurnRequest, session: DeviceSession) -> None:
        self.turn_id = turn_id
        self.request = request
        self.session = session
        self.cancelled = False
        self.tts_open = False  # `tts start` sent
        self.stop_sent = False  # `tts stop` sent (by us or by whoever cancelled us)
        self.spoken: list[str] = []  # sentences whose audio started going out
        self.frames_sent = 0
        self._emotion_sent = False
        self._agent_turn: Any = None  # the agent's turn, once the agent was asked
        identity = getattr(session, "identity", None)
        source = "speech" if request.user_text is not None else "prompt"
        self.timing = TurnTiming(getattr(identity, "device_id", ""), source, turn_id)

    def __repr__(self) -> str:
        return f"<turn {self.turn_id}{' cancelled' if self.cancelled else ''}>"

    @property
    def speaking(self) -> bool:
        return self.tts_open and not self.stop_sent

    async def run(self) -> None:
        CURRENT_TURN.set(self)
        self.timing.mark("started")
        session = self.session
        sid = session.session_id
        try:
            user_text = self.request.user_text
            if user_text is not None and not await session.send_for(self, messages.stt(sid, user_text)):
                return
            self.timing.mark("stt_sent")
            if not await session.send_for(self, messages.tts_start(sid)):
                return
            self.tts_open = True
            session.on_turn_state(self)
            await self._speak()
        except asyncio.CancelledError:
            raise
        except ConnectionClosed:
            pass
        except Exception:
            log.exception("%s: %s failed; closing it with tts stop", session.name, self)
        finally:
            await self._close_tts()
            if self.cancelled and self._agent_turn is not None:
                # Cut off while speaking (abort, barge-in) even if the text was complete: the history
                # keeps only what the user actually heard.
                await self._interrupt_agent()
            self.timing.finish(self.cancelled)

    async def _close_tts(self) -> None:
        if self.tts_open and not self.stop_sent:
            self.stop_sent = True
            await self.session.send_tts_stop(f"{self} finished")
        self.session.on_turn_state(self)

    async def _speak(self) -> None:
        cfg = self.session.services.config.audio
        pacer = PlaybackPacer(self.session.downlink.frame_ms, cfg.prebuffer_frames)
        sentences: asyncio.Queue[str | None] = asyncio.Queue()
        frames: asyncio.Queue[tuple[str, Any] | None] = asyncio.Queue()
        producer = asyncio.create_task(self._produce(sentences), name=f"{self}:agent")
        synthesiser = asyncio.create_task(self._synthesise(sentences, frames), name=f"{self}:tts")
        try:
            if not await self._send_paced(frames, pacer):
                return  # the turn is no longer live: stop generating and synthesising (finally below)
            await producer
            await synthesiser
            await pacer.wait_drained(cfg.drain_margin_ms)
        finally:
            for task in (producer, synthesiser):
                task.cancel()
            await asyncio.gather(producer, synthesiser, return_exceptions=True)

    # ---- stage 1: the agent's words, cut into sentences ----------------------------------------

    async def _produce(self, sentences: asyncio.Queue[str | None]) -> None:
        try:
            if self.request.prompt_text is not None:
                if self.request.prompt_text.strip():
                    self.timing.mark("first_sentence")
                    sentences.put_nowait(self.request.prompt_text)
                return
            await self._produce_from_agent(sentences)
        finally:
            sentences.put_nowait(None)

    async def _produce_from_agent(self, sentences: asyncio.Queue[str | None]) -> None:
        session = self.session
        assert self.request.user_text is not None
        msg = InboundMessage(
            channel="xiaozhi",
            sender_id=session.identity.device_id,
            chat_id=session.identity.device_id,
            content=self.request.user_text,
            metadata={"session_id": session.session_id, "client_id": session.identity.client_id},
        )
        turn = session.services.agent.begin_turn(msg, device_tools=session.device_tools())
        self._agent_turn = turn
        splitter = SentenceSplitter()
        finished = False
        try:
            async for event in turn:
                if isinstance(event, Emotion):
                    await self._send_emotion(event.name)
                elif isinstance(event, TextChunk):
                    for sentence in splitter.feed(event.text):
                        await self._queue_sentence(sentences, sentence)
            for sentence in splitter.flush():
                await self._queue_sentence(sentences, sentence)
            finished = True
        finally:
            if not finished:  # cancelled or failed: history keeps only what was really spoken
                await self._interrupt_agent()

    async def _interrupt_agent(self) -> None:
        if self._agent_turn is None:
            return
        try:
            await asyncio.shield(self._agent_turn.interrupt(" ".join(self.spoken)))
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("%s: agent interrupt failed", self)

    async def _send_emotion(self, name: str) -> None:
        if await self.session.send_for(self, messages.llm(self.session.session_id, name)):
            self._emotion_sent = True

    async def _queue_sentence(self, sentences: asyncio.Queue[str | None], sentence: str) -> None:
        if not self._emotion_sent:  # the face changes before the first words
            await self._send_emotion(DEFAULT_EMOTION)
        self.timing.mark("first_sentence")
        sentences.put_nowait(sentence)

    # ---- stage 2: sentences → encoded frames ---------------------------------------------------

    async def _synthesise(
        self, sentences: asyncio.Queue[str | None], frames: asyncio.Queue[tuple[str, Any] | None]
    ) -> None:
        services = self.session.services
        loop = asyncio.get_running_loop()
        renderer = DownlinkRenderer(services.speech.tts.sample_rate, self.session.downlink)
        try:
            while (sentence := await sentences.get()) is not None:
                chunks = iter(services.speech.tts.synthesize(sentence))
                announced = False
                try:
                    while True:
                        packets, done = await loop.run_in_executor(
                            services.speak_executor, _next_packets, chunks, renderer, self.timing
                        )
                        if packets and not announced:
                            frames.put_nowait(("sentence", sentence))
                            announced = True
                        for packet in packets:
                            frames.put_nowait(("audio", packet))
                        if done:
                            break
                except Exception:
                    log.exception("%s: TTS failed for %r; skipping that sentence", self, sentence)
            for packet in await loop.run_in_executor(services.speak_executor, renderer.flush):
                frames.put_nowait(("audio", packet))
        finally:
            frames.put_nowait(None)

    # ---- stage 3: paced sending ----------------------------------------------------------------

    async def _send_paced(self, frames: asyncio.Queue[tuple[str, Any] | None], pacer: PlaybackPacer) -> bool:
        """Send every frame on the playback clock; False if the turn stopped being the live one."""
        session = self.session
        pending_sentence: str | None = None
        while (item := await frames.get()) is not None:
            kind, data = item
            if kind == "sentence":
                pending_sentence = data  # goes out right before its first frame, on the same timeline
                continue
            await pacer.wait_for_slot()
            if pending_sentence is not None:
                if not await session.send_for(self, messages.tts_sentence_start(session.session_id,
                                                                                  pending_sentence)):
                    return False
                self.spoken.append(pending_sentence)
                pending_sentence = None
            if not await session.send_audio_for(self, data, self.frames_sent * session.downlink.frame_ms):
                return False
            self.timing.mark("first_audio_sent")
            pacer.frame_sent()
            self.frames_sent += 1
        return True
