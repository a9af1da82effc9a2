"""One device connection, the dispatcher: hello, listen modes, ordered frame handling, turns, timers.

Who owns what:
- `Inbox`: every frame, in arrival order, bounded (the reader waits when full), except audio that
  `UplinkRounds` (wren.session.uplink_rounds) feeds straight from the reader while the inbox is empty;
- `Listener` (wren.session.listening): the uplink pipeline of the utterance being captured;
- `TurnDecider` (wren.pipeline.turn_decision): answer the words, or the empty-input rule;
- `ReplyQueue` (wren.session.replies): replies one at a time, each a downlink pipeline;
- `Outbox`: the one write path to the device (live-turn guard, `tts start`/`stop` pairing, close codes);
- `TimerLink`: the device's timers (keep the socket, tell the device).
This class reads frames and decides which of them acts; it writes nothing itself but through the outbox.

A `listen stop` finalises only after every audio frame received before it has gone through the uplink,
so an utterance is never cut short under load.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from shared_protocol import ProtocolError, UnknownMessageType, audio, messages
from shared_protocol.constants import CLOSE_BAD_HELLO, CLOSE_NO_HELLO, CLOSE_NORMAL, CLOSE_POLICY
from wren.pipeline.downlink import DownlinkFormat
from wren.pipeline.timing import UplinkTiming
from wren.session.device_tools import DeviceTools
from wren.session.hello import HelloRefused, Negotiated, looks_like_hello, negotiate, with_transport
from wren.session.inbox import AudioRun, Inbox, ReplyEnded, RoundResult
from wren.session.limits import UPLINK_CLOSE_AFTER_S, UPLINK_CLOSE_FACTOR, TypedGate, UplinkGate
from wren.session.listening import Listener
from wren.session.outbox import Outbox
from wren.session.replies import ReplyQueue
from wren.session.reply import ReplyContext, ReplyTurn
from wren.session.services import Connection, ConnectionClosed, SessionServices
from wren.session.state import DeviceState
from wren.session.timer_link import TimerLink
from wren.session.turn_taking import TurnTaking

log = logging.getLogger(__name__)


@dataclass
class SessionStats:
    """Dropped input, counted (and logged at debug) rather than failing the session."""

    frames_before_hello: int = 0
    binary_not_listening: int = 0
    malformed_json: int = 0
    unknown_types: int = 0


class DeviceSession:
    def __init__(self, identity: Any, connection: Connection, services: SessionServices) -> None:
        self.identity = identity
        self.services = services
        self.config = services.config
        self.session_id = str(uuid.uuid4())
        self.session_key = f"xiaozhi:{identity.device_id}"
        self.name = f"device {identity.device_id}"
        self.stats = SessionStats()
        self.outbox = Outbox(connection, self.session_id, self.name)
        self.outbox.protocol_version = identity.protocol_version or 1
        a = self.config.audio
        self._configured_downlink = DownlinkFormat(a.downlink_format, a.downlink_sample_rate,
                                                   a.downlink_frame_ms, a.opus_bitrate)
        self.state = DeviceState.IDLE
        self.hello_received = asyncio.Event()
        self.negotiated: Negotiated | None = None  # the audio and framing of the last hello (the web console)
        self.uplink_timing = UplinkTiming(identity.device_id, services.timing)
        self.listener = Listener(services.speech, self.config.vad, services.listen_executor,
                                 self.uplink_timing, identity.device_id)
        limits = self.config.limits
        self.tools = DeviceTools(services.agent, self.session_key, self.config.asr.bias, self.name,
                                 self.outbox.send_mcp, limits.device_tools, limits.device_tool_bytes)
        self.uplink_gate = UplinkGate(limits.uplink_realtime_factor, self.name)
        self.last_activity = self.connected_at = time.monotonic()
        timers = getattr(services.agent, "timers", None)  # wren.agent.timers.TimerService
        self.timer_link = TimerLink(self.session_key, self.session_id, timers, self.outbox.send)
        self.reply_context = ReplyContext(
            outbox=self.outbox, device_id=identity.device_id, client_id=identity.client_id,
            agent=services.agent, device_tools=self.tools.client, tts=services.speech.tts,
            speak_executor=services.speak_executor, downlink=self._configured_downlink,
            prebuffer_frames=a.prebuffer_frames, drain_margin_ms=a.drain_margin_ms,
            on_state=self._on_turn_state, on_audio=self.touch, timing_sink=services.timing,
            tts_scheduler=services.tts_scheduler,
            hold_phrase_after_s=max(0, self.config.agent.hold_phrase_after_ms) / 1000,
            hold_audio=services.hold_audio, phrase_packets=services.phrase_packets,
        )
        self.replies = ReplyQueue(self.reply_context, self.name, self._after_turn, limits.queued_replies)
        self.turns = TurnTaking(
            self.listener, self.replies, name=self.name, session_key=self.session_key, agent=services.agent,
            is_wake_word=services.is_wake_word, keep_socket=self.timer_link.holds, touch=self.touch,
            on_state=self._update_state, answer_abort=self.outbox.answer_abort,
            typed_gate=TypedGate(limits.typed_per_minute, limits.typed_text_chars, self.name),
        )
        self._inbox = Inbox()
        self._rounds = services.uplink_rounds
        self._busy = False  # the processor is handling an item (so audio goes through the inbox)
        self._runner: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._closed = False

    # ---- lifecycle (called by the transport) ---------------------------------------------------

    def start(self) -> None:
        spawn = asyncio.get_running_loop().create_task
        self._runner = spawn(self._process_inbox(), name=f"{self.name}:inbox")
        self._tasks = [
            spawn(self._watch_hello(), name=f"{self.name}:hello-timer"),
            spawn(self._watch_idle(), name=f"{self.name}:idle-timer"),
            spawn(self.replies.serve(), name=f"{self.name}:replies"),
        ]

    async def receive_text(self, text: str) -> None:
        await self._enqueue(text)

    async def receive_binary(self, data: bytes) -> None:
        gate = self.uplink_gate
        if not gate.admit(time.monotonic()):  # faster than `limits.uplink_realtime_factor` × real time
            if gate.too_fast and not self._closed and not self.outbox.closed:
                log.warning("%s: uplink above %g × real time for %d s; closing", self.name,
                            UPLINK_CLOSE_FACTOR, UPLINK_CLOSE_AFTER_S)
                await self.outbox.close(CLOSE_POLICY, "uplink audio far faster than real time")
            return
        self.uplink_timing.arrived()
        if self._round_open():
            payload = self._payload(data)
            if payload:
                self._rounds.add(self, payload, self.uplink_timing.take_arrival())
                return
        await self._enqueue(data)

    async def _enqueue(self, frame: str | bytes) -> None:
        if self._closed or self._runner is None or self._runner.done():
            return
        self._rounds.run_if_holding(self)  # this session's frames waiting in the round go first
        await self._inbox.put(frame)

    # ---- uplink rounds (wren.session.uplink_rounds) -------------------------------------------

    def _round_open(self) -> bool:
        """This frame may skip the inbox: a live processor has nothing waiting or in hand, and it is fed."""
        runner = self._runner
        return (not self._busy and self._inbox.idle and not self._closed and runner is not None
                and not runner.done() and self.hello_received.is_set() and self.listener.accepts_now()
                and self.turns.feeds_audio())

    def _payload(self, data: bytes) -> bytes | None:
        try:
            return audio.unpack(self.outbox.protocol_version, data)[0]
        except ProtocolError:
            return None  # through the inbox, which counts and logs it

    def round_done(self, fed: list[tuple[bytes, float | None]], outcome: Any) -> None:
        """`UplinkRounds`' hand-back: frame outcomes of a prefix of `fed`, the call's error, or None."""
        if self._closed:
            return
        if isinstance(outcome, BaseException):  # as the processor logs a failed frame
            log.error("%s: handling a binary frame failed", self.name, exc_info=outcome)
            return
        consumed = outcome or []
        events = self.listener.settle(fed, consumed)
        rest = fed[len(consumed):]
        if (events or rest) and not self._inbox.post_round(RoundResult(events, rest)):
            log.error("%s: an uplink round's result was dropped (inbox full)", self.name)

    async def close(self) -> None:
        """The socket is gone (or closing): stop everything, give pooled resources back."""
        if self._closed:
            return
        self._closed = True
        await self.replies.close()  # the reply in progress first, so no worker starts another
        tasks = [t for t in [self._runner, *self._tasks] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.listener.close()
        await self.tools.close()
        self.uplink_timing.report()
        d = self.dropped_counts()
        log.info(
            "%s: session %s closed (%d turns; dropped: %d before hello, %d binary while not listening, "
            "%d bad binary, %d malformed JSON, %d unknown types, %d typed flood, %d uplink flood)",
            self.name, self.session_id, self.replies.turns, d["before_hello"], d["binary_not_listening"],
            d["bad_binary"], d["malformed_json"], d["unknown_type"], d["typed_flood"], d["uplink_flood"],
        )

    def dropped_counts(self) -> dict[str, int]:
        """Input dropped so far, by kind (they only grow): the close log line and `/metrics`."""
        s = self.stats
        return {
            "before_hello": s.frames_before_hello,
            "binary_not_listening": s.binary_not_listening,
            "bad_binary": self.listener.bad_packets,
            "malformed_json": s.malformed_json,
            "unknown_type": s.unknown_types,
            "typed_flood": self.turns.typed_gate.refused,  # [limits] typed_per_minute
            "uplink_flood": self.uplink_gate.dropped,  # [limits] uplink_realtime_factor
        }

    # ---- state -----------------------------------------------------------------------------------

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def _update_state(self, why: str) -> None:
        if self.outbox.speaking:
            new = DeviceState.SPEAKING
        elif self.listener.active:
            new = DeviceState.LISTENING
        else:
            new = DeviceState.IDLE
        if new is not self.state:
            log.info("%s: %s → %s (%s)", self.name, self.state.value, new.value, why)
            self.state = new

    def _on_turn_state(self, turn: ReplyTurn) -> None:
        self._update_state(f"{turn} {'speaking' if self.outbox.speaking else 'done'}")

    # ---- timers ----------------------------------------------------------------------------------

    async def _watch_hello(self) -> None:
        timeout = self.config.server.hello_timeout_s
        try:
            await asyncio.wait_for(self.hello_received.wait(), timeout)
        except TimeoutError:
            log.warning("%s: no hello within %.0f s; closing", self.name, timeout)
            await self.outbox.close(CLOSE_NO_HELLO, f"no hello within {timeout:g} s")

    async def _watch_idle(self) -> None:
        """Idle timer from connect time (xinnan #777): a socket where nobody speaks is closed."""
        limit = self.config.server.idle_timeout_s
        while True:
            if self.replies.busy or self.timer_link.holds():
                self.touch()  # a reply in progress, or a timer that will speak on this socket, is activity
            if self.hello_received.is_set():
                await self.timer_link.tick()  # tells the device about its timers (and keeps its channel)
            remaining = self.last_activity + limit - time.monotonic()
            if remaining <= 0:
                log.info("%s: idle for %.0f s; closing", self.name, limit)
                await self.outbox.close(CLOSE_NORMAL, f"idle for {limit:g} s")
                return
            await asyncio.sleep(min(remaining, 1.0))

    # ---- the inbox --------------------------------------------------------------------------------------

    async def _process_inbox(self) -> None:
        try:
            while True:
                item = await self._inbox.next()
                self._busy = True
                try:
                    if isinstance(item, AudioRun):
                        await self._on_audio_run(item.frames)
                    elif isinstance(item, RoundResult):
                        await self._on_round_result(item)
                    elif isinstance(item, ReplyEnded):
                        await self.turns.on_reply_ended()
                    else:
                        await self._on_text(item.text)
                except ConnectionClosed:
                    # Nothing more can be said on this socket: make sure the reader ends too.
                    await self.outbox.close(CLOSE_NORMAL, "session ended")
                    return
                except Exception:
                    # One bad frame never ends the session (or touches another one).
                    log.exception("%s: handling a %s frame failed", self.name,
                                  "binary" if isinstance(item, AudioRun | RoundResult) else "text")
                finally:
                    self._busy = False
        finally:
            self._inbox.drain()

    async def _on_text(self, text: str) -> None:
        try:
            msg = messages.parse(with_transport(text))
        except UnknownMessageType as exc:
            self.stats.unknown_types += 1
            log.debug("%s: ignoring unknown message type %r", self.name, exc.type)
            return
        except ProtocolError as exc:
            self.stats.malformed_json += 1
            if not self.hello_received.is_set() and looks_like_hello(text):
                # The device would wait 10 s for a reply that never comes: say why, right away.
                log.warning("%s: invalid hello: %s", self.name, exc)
                await self.outbox.close(CLOSE_BAD_HELLO, f"invalid hello: {exc}"[:120])
                raise ConnectionClosed() from None
            log.info("%s: ignoring malformed frame: %s", self.name, exc)
            return
        kind = msg["type"]
        if kind == "hello":
            await self._on_hello(msg)
            return
        if not self.hello_received.is_set():
            self.stats.frames_before_hello += 1
            log.info("%s: %r before hello; dropped", self.name, kind)
            return
        if kind == "listen":
            await self.turns.on_listen(msg)
        elif kind == "abort":
            await self.turns.on_abort(msg.get("reason"))
        elif kind == "mcp":
            self.tools.handle(msg["payload"])
        elif kind == "ping":
            await self.outbox.send(messages.pong(time.strftime("%Y-%m-%d %H:%M:%S")))
        else:
            log.debug("%s: %r is not handled on this side; ignored", self.name, kind)

    async def _on_audio_run(self, frames: list[bytes]) -> None:
        """Consecutive audio frames, in arrival order, through the uplink; a turn event (onset, the end
        of the utterance) is acted on before the frames after it are fed."""
        arrivals = [self.uplink_timing.take_arrival() for _ in frames]
        if not self.hello_received.is_set():
            self.stats.frames_before_hello += len(frames)
            return
        pending: list[tuple[bytes, float | None]] = []
        for data, arrival in zip(frames, arrivals, strict=True):
            try:
                payload, _timestamp = audio.unpack(self.outbox.protocol_version, data)
            except ProtocolError as exc:
                self.listener.bad_packets += 1
                log.debug("%s: dropped a bad audio frame: %s", self.name, exc)
                continue
            pending.append((payload, arrival))
        self.stats.binary_not_listening += await self.turns.on_audio(pending)

    async def _on_round_result(self, result: RoundResult) -> None:
        await self.turns.on_uplink_events(await self.listener.with_words(result.events))
        if result.rest:
            self.stats.binary_not_listening += await self.turns.on_audio(list(result.rest))

    # ---- hello -----------------------------------------------------------------------------------

    async def _on_hello(self, msg: dict) -> None:
        try:
            hello = negotiate(msg, self.identity.protocol_version, self._configured_downlink, self.name)
        except HelloRefused as refused:
            await self.outbox.close(refused.code, refused.reason)
            raise ConnectionClosed() from None
        self.outbox.protocol_version = hello.protocol_version
        self.negotiated = hello
        self.reply_context.downlink = hello.downlink
        self.uplink_timing.set_frame_ms(hello.uplink_frame_ms)
        self.uplink_gate.set_frame_ms(hello.uplink_frame_ms)
        first = not self.hello_received.is_set()
        # The reply goes out before anything else (reference §10 row 1: never keep a hello waiting).
        await self.outbox.send(messages.hello_server(self.session_id, hello.downlink.audio_params()))
        self.hello_received.set()
        self.touch()
        await self.listener.abandon()
        self.listener.configure(hello.decoder, hello.uplink_rate, self.tools.bias.current)
        self.tools.refresh_bias()
        if first:
            self.timer_link.connected()  # what fell due while the device was away is spoken now
        log.info("%s: hello (protocol v%d, uplink %s %d Hz/%d ms, downlink %s %d Hz/%d ms), session %s",
                 self.name, hello.protocol_version, hello.uplink_format, hello.uplink_rate,
                 hello.uplink_frame_ms, hello.downlink.format, hello.downlink.sample_rate,
                 hello.downlink.frame_ms, self.session_id)
        if first and hello.features.get("mcp"):
            self.tools.start_mcp()

    # ---- replies ---------------------------------------------------------------------------------

    @property
    def in_turn(self) -> bool:
        """A person is speaking to this device or waiting for / hearing its reply (background work such as
        the phrase cache's warm-up waits while any device is in a turn)."""
        return self.replies.busy or self.listener.hearing

    @property
    def can_announce(self) -> bool:
        return self.hello_received.is_set() and not self._closed and not self.outbox.closed

    async def announce(self, text: str) -> bool:
        """Speak `text` unprompted (a timer going off): to an idle device at once, or right after the reply
        in progress. True once its words started going out; False if it could not be spoken (no hello yet,
        socket gone, too many waiting, or cancelled before a word went out). The caller keeps it then."""
        if not self.can_announce:
            return False
        return await self.replies.announce(text)

    async def _after_turn(self, turn: ReplyTurn) -> bool:
        """The reply worker's hook after each turn; False closes the connection (the give-up goodbye)."""
        self._update_state(f"{turn} ended")
        self.tools.refresh_bias()  # a name taught in this turn is recognised from the next one
        if turn.request.close_after and not turn.cancelled:
            log.info("%s: no speech after repeated prompts; closing", self.name)
            await self.outbox.close(CLOSE_NORMAL, "no speech; goodbye")
            return False
        self._rounds.run_if_holding(self)  # as in _enqueue
        await self._inbox.post(ReplyEnded())  # acted on in order with the frames (turn-taking table)
        return True
