"""One device connection: hello, listen modes, ordered frame handling, turns, cancellation, timers.

Frames are handled strictly in arrival order: the transport's reader task puts every frame into a
bounded inbox (`receive_text` / `receive_binary` wait when it is full, which back-pressures the
socket instead of dropping audio), and one processor task handles them one after another. So a
`listen stop` finalises only after every audio frame received before it has gone through the
decoder, VAD and recogniser: an utterance is never cut short under load. Consecutive audio frames
waiting in the inbox are handled as one run, in one listen-executor call (`UtteranceCapture.process_run`),
up to the first text frame: under load the per-frame thread hand-off (which cost more than decoding the
frame) is paid once per run, and order is kept.

Replies run in their own task (one at a time, queued in order), so audio and `abort` keep flowing
while a reply is being spoken. Each reply has a turn id; `send_for` refuses output of any turn that
is not the live one, which is how an aborted turn can never leak a late frame, sentence or tool call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

from shared_protocol import ProtocolError, UnknownMessageType, audio, messages
from wren.session.capture import CaptureEvent, UtteranceCapture
from wren.session.downlink import DownlinkFormat
from wren.session.empty_input import EmptyInputRule, GiveUp, Prompt, Silence
from wren.session.recognition_bias import RecognitionBias
from wren.session.reply import CURRENT_TURN, ReplyTurn, TurnRequest
from wren.session.services import Connection, ConnectionClosed, SessionServices
from wren.session.state import DeviceState, ListenMode
from wren.session.timer_link import TimerLink
from wren.session.timing import UplinkTiming
from wren.speech.codec import CodecError, make_decoder

log = logging.getLogger(__name__)

INBOX_FRAMES = 256  # ~15 s of 60 ms audio; beyond that the reader waits (TCP back-pressure)
MAX_AUDIO_RUN = 32  # frames per executor call (≈2 s of audio): one session cannot hold a listen thread long
CLOSE_BAD_HELLO = 4400
CLOSE_NO_HELLO = 4408
CLOSE_BAD_AUDIO_PARAMS = 4415
CLOSE_NORMAL = 1000
MAX_ANNOUNCEMENTS = 8  # unprompted announcements waiting to be spoken on one device
UPLINK_DEFAULTS = {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60}


def _looks_like_hello(text: str) -> bool:
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("type") == "hello"


@dataclass
class SessionStats:
    """Dropped input, counted (and logged at debug) rather than failing the session."""

    frames_before_hello: int = 0
    binary_not_listening: int = 0
    bad_binary: int = 0
    malformed_json: int = 0
    unknown_types: int = 0
    turns: int = 0


class DeviceSession:
    def __init__(self, identity: Any, connection: Connection, services: SessionServices) -> None:
        self.identity = identity
        self.conn = connection
        self.services = services
        self.config = services.config
        self.session_id = str(uuid.uuid4())
        self.session_key = f"xiaozhi:{identity.device_id}"
        self.name = f"device {identity.device_id}"
        self.stats = SessionStats()
        self.uplink_timing = UplinkTiming(identity.device_id)
        self.protocol_version: int = identity.protocol_version or 1
        self.downlink = DownlinkFormat(
            self.config.audio.downlink_format,
            self.config.audio.downlink_sample_rate,
            self.config.audio.downlink_frame_ms,
            self.config.audio.opus_bitrate,
        )
        self.state = DeviceState.IDLE
        self.mode = ListenMode.AUTO
        self.hello_received = asyncio.Event()
        self.capture: UtteranceCapture | None = None
        self.empty_rule = EmptyInputRule()
        self.armed_by_wake = False
        self.device_mcp: Any = None
        self.last_activity = self.connected_at = time.monotonic()
        timers = getattr(services.agent, "timers", None)  # wren.agent.timers.TimerService
        self.timer_link = TimerLink(self.session_key, self.session_id, timers, self._send_json)
        self._announcements: dict[ReplyTurn, asyncio.Future[bool]] = {}
        self._inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(INBOX_FRAMES)
        self._turn_ids = itertools.count(1)
        self._replies: deque[ReplyTurn] = deque()
        self._replies_ready = asyncio.Event()
        self._current: ReplyTurn | None = None
        self._current_task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._background: set[asyncio.Task[Any]] = set()  # short jobs (recognition bias refresh)
        self.recognition_bias: RecognitionBias | None = None
        self._runner: asyncio.Task[None] | None = None
        self._listen_job: concurrent.futures.Future[Any] | None = None
        self._closed = False

    # ---- lifecycle (called by the transport) ---------------------------------------------------

    def start(self) -> None:
        spawn = asyncio.get_running_loop().create_task
        self._runner = spawn(self._process_inbox(), name=f"{self.name}:inbox")
        self._tasks = [
            spawn(self._watch_hello(), name=f"{self.name}:hello-timer"),
            spawn(self._watch_idle(), name=f"{self.name}:idle-timer"),
            spawn(self._reply_worker(), name=f"{self.name}:replies"),
        ]

    async def receive_text(self, text: str) -> None:
        await self._enqueue("text", text)

    async def receive_binary(self, data: bytes) -> None:
        self.uplink_timing.arrived()
        await self._enqueue("binary", data)

    async def _enqueue(self, kind: str, data: Any) -> None:
        if self._closed or self._runner is None or self._runner.done():
            return
        await self._inbox.put((kind, data))

    async def close(self) -> None:
        """The socket is gone (or closing): stop everything, give pooled resources back."""
        if self._closed:
            return
        self._closed = True
        self._cancel_all_replies()
        running = [self._runner, self._current_task, *self._tasks, *self._background]
        tasks = [t for t in running if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._listen_job is not None and not self._listen_job.done():
            await asyncio.wait([asyncio.wrap_future(self._listen_job)])
        if self.capture is not None:
            try:
                await self._in_listen_executor(self.capture.abandon)
            except Exception:
                log.exception("%s: releasing capture failed", self.name)
        if self.device_mcp is not None:
            self.device_mcp.close()
        for turn in list(self._announcements):
            self._settle_announcement(turn)
        self.uplink_timing.report()
        log.info(
            "%s: session %s closed (%d turns; dropped: %d before hello, %d binary while not listening, "
            "%d bad binary, %d malformed JSON, %d unknown types)",
            self.name, self.session_id, self.stats.turns, self.stats.frames_before_hello,
            self.stats.binary_not_listening, self.stats.bad_binary, self.stats.malformed_json,
            self.stats.unknown_types,
        )

    # ---- sending ---------------------------------------------------------------------------------

    async def _send_json(self, msg: dict) -> None:
        if self.conn.closed:
            raise ConnectionClosed()
        await self.conn.send_text(messages.encode(msg))

    def _live(self, turn: ReplyTurn) -> bool:
        return not turn.cancelled and turn is self._current and not self._closed and not self.conn.closed

    async def send_for(self, turn: ReplyTurn, msg: dict) -> bool:
        """Send a message of `turn`, unless that turn is no longer the live one."""
        if not self._live(turn):
            return False
        await self._send_json(msg)
        return True

    async def send_audio_for(self, turn: ReplyTurn, packet: bytes, timestamp_ms: int) -> bool:
        if not self._live(turn):
            return False
        await self.conn.send_bytes(audio.pack(self.protocol_version, packet, timestamp_ms & 0xFFFFFFFF))
        self.touch()  # outgoing speech is activity (reference §10 row 12)
        return True

    async def send_tts_stop(self, why: str) -> None:
        if self.conn.closed:
            return
        log.debug("%s: tts stop (%s)", self.name, why)
        with contextlib.suppress(ConnectionClosed):
            await self._send_json(messages.tts_stop(self.session_id))

    async def _send_device_mcp(self, payload: dict) -> None:
        """Sender for the DeviceMcpClient; a tool call of a cancelled turn is refused, never sent."""
        turn = CURRENT_TURN.get()
        if turn is not None and (turn.cancelled or turn is not self._current):
            raise ConnectionClosed(f"{turn} was cancelled; device tool call not sent")
        await self._send_json(messages.mcp(payload, self.session_id))

    def device_tools(self) -> Any:
        return self.device_mcp

    # ---- state -----------------------------------------------------------------------------------

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def _derive_state(self) -> DeviceState:
        if self._current is not None and self._current.speaking:
            return DeviceState.SPEAKING
        if self.capture is not None and self.capture.active:
            return DeviceState.LISTENING
        return DeviceState.IDLE

    def _update_state(self, why: str) -> None:
        new = self._derive_state()
        if new is not self.state:
            log.info("%s: %s → %s (%s)", self.name, self.state.value, new.value, why)
            self.state = new

    def on_turn_state(self, turn: ReplyTurn) -> None:
        self._update_state(f"{turn} {'speaking' if turn.speaking else 'done'}")

    # ---- timers ----------------------------------------------------------------------------------

    async def _watch_hello(self) -> None:
        timeout = self.config.server.hello_timeout_s
        try:
            await asyncio.wait_for(self.hello_received.wait(), timeout)
        except TimeoutError:
            log.warning("%s: no hello within %.0f s; closing", self.name, timeout)
            await self.conn.close(CLOSE_NO_HELLO, f"no hello within {timeout:g} s")

    async def _watch_idle(self) -> None:
        """Idle timer from connect time (xinnan #777): a socket where nobody speaks is closed."""
        limit = self.config.server.idle_timeout_s
        while True:
            if self._current is not None or self._replies or self.timer_link.holds():
                self.touch()  # a reply in progress, or a timer that will speak on this socket, is activity
            if self.hello_received.is_set():
                await self.timer_link.tick()  # tells the device about its timers (and keeps its channel)
            remaining = self.last_activity + limit - time.monotonic()
            if remaining <= 0:
                log.info("%s: idle for %.0f s; closing", self.name, limit)
                await self.conn.close(CLOSE_NORMAL, f"idle for {limit:g} s")
                return
            await asyncio.sleep(min(remaining, 1.0))

    # ---- the inbox --------------------------------------------------------------------------------------

    def _take_audio_run(self, first: bytes) -> tuple[list[bytes], tuple[str, Any] | None]:
        """`first` plus the audio frames right behind it in the inbox, up to the first text frame (which
        is returned to be handled next, so arrival order is kept)."""
        run = [first]
        while len(run) < MAX_AUDIO_RUN and not self._inbox.empty():
            item = self._inbox.get_nowait()
            if item[0] != "binary":
                return run, item
            run.append(item[1])
        return run, None

    async def _process_inbox(self) -> None:
        held: tuple[str, Any] | None = None
        try:
            while True:
                if held is not None:
                    (kind, data), held = held, None
                else:
                    kind, data = await self._inbox.get()
                try:
                    if kind == "text":
                        await self._on_text(data)
                    else:
                        run, held = self._take_audio_run(data)
                        await self._on_audio_run(run)
                except ConnectionClosed:
                    # Nothing more can be said on this socket: make sure the reader ends too.
                    await self.conn.close(CLOSE_NORMAL, "session ended")
                    return
                except Exception:
                    # One bad frame never ends the session (or touches another one).
                    log.exception("%s: handling a %s frame failed", self.name, kind)
        finally:
            # A reader blocked on a full inbox must not wait forever for a processor that is gone.
            while not self._inbox.empty():
                self._inbox.get_nowait()

    async def _on_text(self, text: str) -> None:
        try:
            msg = messages.parse(text)
        except UnknownMessageType as exc:
            self.stats.unknown_types += 1
            log.debug("%s: ignoring unknown message type %r", self.name, exc.type)
            return
        except ProtocolError as exc:
            self.stats.malformed_json += 1
            if not self.hello_received.is_set() and _looks_like_hello(text):
                # The device would wait 10 s for a reply that never comes: say why, right away.
                log.warning("%s: invalid hello: %s", self.name, exc)
                await self.conn.close(CLOSE_BAD_HELLO, f"invalid hello: {exc}"[:120])
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
            await self._on_listen(msg)
        elif kind == "abort":
            await self._on_abort(msg.get("reason"))
        elif kind == "mcp":
            if self.device_mcp is not None:
                self.device_mcp.handle(msg["payload"])
            else:
                log.debug("%s: mcp frame without a device MCP client; ignored", self.name)
        elif kind == "ping":
            await self._send_json(messages.pong(time.strftime("%Y-%m-%d %H:%M:%S")))
        else:
            log.debug("%s: %r is not handled on this side; ignored", self.name, kind)

    async def _on_audio_run(self, frames: list[bytes]) -> None:
        """Consecutive audio frames, in arrival order: decoded, VAD'd and recognised in as few listen-
        executor calls as possible (one, unless a frame produces a capture event: that event is acted on
        before the frames after it are fed, as frame-by-frame handling would)."""
        arrivals = [self.uplink_timing.take_arrival() for _ in frames]
        if not self.hello_received.is_set():
            self.stats.frames_before_hello += len(frames)
            return
        pending: list[tuple[bytes, float | None]] = []
        for data, arrival in zip(frames, arrivals, strict=True):
            try:
                payload, _timestamp = audio.unpack(self.protocol_version, data)
            except ProtocolError as exc:
                self._bad_audio(exc)
                continue
            pending.append((payload, arrival))
        while pending:
            capture = self.capture
            if capture is None or not capture.active:
                self.stats.binary_not_listening += len(pending)
                return
            outcomes = await self._in_listen_executor(capture.process_run, [p for p, _ in pending])
            events: list[CaptureEvent] = []
            for (_payload, arrival), outcome in zip(pending, outcomes, strict=False):
                if isinstance(outcome, CodecError):
                    self._bad_audio(outcome)
                else:
                    self.uplink_timing.processed(arrival)
                    events = outcome
            pending = pending[len(outcomes):]
            for event in events:
                await self._on_capture_event(event)

    def _bad_audio(self, exc: Exception) -> None:
        self.stats.bad_binary += 1
        log.debug("%s: dropped a bad audio frame: %s", self.name, exc)

    async def _in_listen_executor(self, fn: Any, *args: Any) -> Any:
        # The capture is used by one thread at a time: remember the job so close() can wait for a job
        # that is still running after its awaiting task was cancelled.
        job = self.services.listen_executor.submit(fn, *args)
        self._listen_job = job
        return await asyncio.wrap_future(job)

    # ---- hello -----------------------------------------------------------------------------------

    async def _on_hello(self, msg: dict) -> None:
        params = {**UPLINK_DEFAULTS, **(msg.get("audio_params") or {})}
        hello_version = msg.get("version")
        self.protocol_version = self.identity.protocol_version or hello_version or 1
        header_version = self.identity.protocol_version
        if header_version and hello_version and hello_version != header_version:
            log.info("%s: hello version %s differs from Protocol-Version %s; using the header",
                     self.name, hello_version, self.identity.protocol_version)
        try:
            decoder = make_decoder(params["format"], params["sample_rate"], params["channels"],
                                   params["frame_duration"])
        except CodecError as exc:
            log.warning("%s: unusable uplink audio_params %s: %s", self.name, params, exc)
            await self.conn.close(CLOSE_BAD_AUDIO_PARAMS, f"unsupported audio_params: {exc}"[:120])
            raise ConnectionClosed() from None
        if params["format"] == "pcm":
            # No Opus on the device (e.g. the MicroPython firmware): PCM at its own rate, 60 ms frames.
            self.downlink = DownlinkFormat("pcm", params["sample_rate"], 60)
        self.uplink_timing.set_frame_ms(params["frame_duration"])
        first = not self.hello_received.is_set()
        # The reply goes out before anything else (reference §10 row 1: never keep a hello waiting).
        await self._send_json(messages.hello_server(self.session_id, self.downlink.audio_params()))
        self.hello_received.set()
        self.touch()
        if self.capture is not None:
            await self._in_listen_executor(self.capture.abandon)
        self.recognition_bias = RecognitionBias(
            self.services.agent, self.session_key, self._device_tool_specs, self.config.asr.bias,
            self.services.agent.engine.name,
        )
        self.capture = UtteranceCapture(self.services.speech, self.config.vad, decoder, params["sample_rate"],
                                        speaker=self.identity.device_id, bias=self.recognition_bias.current)
        self._spawn_bias_refresh()
        if first:
            self.timer_link.connected()  # what fell due while the device was away is spoken now
        log.info("%s: hello (protocol v%d, uplink %s %d Hz/%d ms, downlink %s %d Hz/%d ms), session %s",
                 self.name, self.protocol_version, params["format"], params["sample_rate"],
                 params["frame_duration"], self.downlink.format, self.downlink.sample_rate,
                 self.downlink.frame_ms, self.session_id)
        features = msg.get("features") or {}
        if first and features.get("mcp"):
            self._start_device_mcp()

    def _start_device_mcp(self) -> None:
        try:
            from wren.tools.device_mcp import DeviceMcpClient
        except ImportError:
            log.warning("%s: device MCP client not available; device tools disabled", self.name)
            return
        self.device_mcp = DeviceMcpClient(self._send_device_mcp)

        async def initialise() -> None:
            try:
                await self.device_mcp.start()
                log.info("%s: device MCP ready, %d tools", self.name, len(self.device_mcp.tools))
            except ConnectionClosed:
                pass
            except Exception as exc:
                log.warning("%s: device MCP initialisation failed: %s", self.name, exc)

        self._tasks.append(asyncio.get_running_loop().create_task(initialise(), name=f"{self.name}:mcp"))

    # ---- listen ----------------------------------------------------------------------------------

    async def _on_listen(self, msg: dict) -> None:
        state = msg["state"]
        self.touch()
        if state == "start":
            self.mode = ListenMode(msg["mode"])
            await self._begin_capture(self.mode, "listen start")
        elif state == "stop":
            if self.capture is not None and self.capture.active:
                await self._finalise("listen stop")
            else:
                log.debug("%s: listen stop while not listening; ignored", self.name)
        elif state == "detect":
            text = msg["text"]
            if self.services.is_wake_word(text):
                log.info("%s: wake word %r; listening (%s)", self.name, text, self.mode.value)
                self.armed_by_wake = True
                await self._begin_capture(self.mode, "wake word")
            elif text.strip():
                log.info("%s: typed query %r", self.name, text)
                if self.capture is not None and self.capture.active:
                    await self._in_listen_executor(self.capture.abandon)
                    self._update_state("typed query")
                self.empty_rule.real_input()
                self._queue_reply(TurnRequest(user_text=text.strip()))

    async def _begin_capture(self, mode: ListenMode, why: str) -> None:
        assert self.capture is not None
        await self._in_listen_executor(self.capture.begin, mode)
        self.uplink_timing.restart()
        self._update_state(f"{why}, {mode.value}")

    async def _on_capture_event(self, event: CaptureEvent) -> None:
        if event is CaptureEvent.ONSET:
            self.touch()
            if self.capture is not None and self.capture.mode is ListenMode.REALTIME and self._current:
                log.info("%s: speech during playback (realtime); barging in", self.name)
                await self._cancel_replies("barge-in")
        elif event in (CaptureEvent.END, CaptureEvent.MAX_LENGTH):
            await self._finalise(event.value)
        elif event is CaptureEvent.NO_SPEECH:
            if self._current is not None or self._replies:
                await self._begin_capture(self.mode, "no speech while replying; timer restarted")
                return
            await self._finalise("no speech")

    async def _finalise(self, why: str) -> None:
        capture = self.capture
        assert capture is not None
        mode = capture.mode
        input_end = time.monotonic()
        result = await self._in_listen_executor(capture.finish)
        stamps = {"input_end": input_end, "asr_done": time.monotonic()}
        log.info("%s: utterance ended (%s, %d ms audio, speech=%s): %r", self.name, why, result.audio_ms,
                 result.heard_speech, result.text)
        if mode is ListenMode.REALTIME:
            await self._begin_capture(mode, "realtime keeps listening")
        else:
            self._update_state(why)
        if result.text:
            self.empty_rule.real_input()
            self.armed_by_wake = False
            self._queue_reply(TurnRequest(user_text=result.text), stamps)
            return
        kind = self.empty_rule.classify(mode, result.heard_speech)
        decision = self.empty_rule.decide(kind, self.armed_by_wake)
        if isinstance(decision, GiveUp) and self.timer_link.holds():
            decision = Silence()  # no goodbye: a pending timer will speak on this socket; listen quietly
        log.info("%s: empty turn (%s) → %s", self.name, kind.value, decision)
        if isinstance(decision, Prompt):
            self.armed_by_wake = False
            words = self.services.agent.render_prompt(self.session_key, decision.kind, decision.count)
            self._queue_reply(TurnRequest(prompt_text=words), stamps)
        elif isinstance(decision, Silence):
            if mode.ends_by_vad and mode is not ListenMode.REALTIME:
                await self._begin_capture(mode, "silent wait")
        elif isinstance(decision, GiveUp):
            words = self.services.agent.render_prompt(self.session_key, decision.kind, decision.count)
            self._queue_reply(TurnRequest(prompt_text=words, close_after=True), stamps)

    # ---- replies ---------------------------------------------------------------------------------

    def _queue_reply(self, request: TurnRequest, stamps: dict[str, float] | None = None) -> ReplyTurn:
        turn = ReplyTurn(next(self._turn_ids), request, self)
        turn.timing.stamps.update(stamps or {})  # input_end / asr_done of a spoken turn
        self._replies.append(turn)
        self._replies_ready.set()
        self.stats.turns += 1
        return turn

    @property
    def can_announce(self) -> bool:
        return self.hello_received.is_set() and not self._closed and not self.conn.closed

    async def announce(self, text: str) -> bool:
        """Speak `text` unprompted (a timer going off): `tts start`, its sentence and audio, `tts stop`, to
        an idle device at once, or right after the reply in progress. True once its words started going
        out (heard, even if the user then cut it short); False if it could not be spoken: no hello yet,
        socket gone, too many waiting, or cancelled before a word went out. The caller keeps it then."""
        if not self.can_announce or len(self._announcements) >= MAX_ANNOUNCEMENTS:
            return False
        heard: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        turn = self._queue_reply(TurnRequest(prompt_text=text))
        self._announcements[turn] = heard
        log.info("%s: announcing %r (%s)", self.name, text, "after the reply" if self._current else "now")
        return await heard

    def _settle_announcement(self, turn: ReplyTurn) -> None:
        heard = self._announcements.pop(turn, None)
        if heard is not None and not heard.done():
            heard.set_result(bool(turn.spoken))

    def _device_tool_specs(self) -> list[Any]:
        return list(getattr(self.device_mcp, "tools", None) or [])

    def _spawn_bias_refresh(self) -> None:
        bias = self.recognition_bias
        if bias is not None and not self._closed:
            task = asyncio.get_running_loop().create_task(bias.refresh(), name=f"{self.name}:bias")
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _reply_worker(self) -> None:
        while True:
            await self._replies_ready.wait()
            if not self._replies:
                self._replies_ready.clear()
                continue
            turn = self._replies.popleft()
            if turn.cancelled:
                self._settle_announcement(turn)
                continue
            self._current = turn
            self._current_task = asyncio.get_running_loop().create_task(
                turn.run(), name=f"{self.name}:{turn}"
            )
            try:
                await asyncio.wait([self._current_task])
            finally:
                self._current = None
                self._current_task = None
                self._settle_announcement(turn)
                self._update_state(f"{turn} ended")
                self._spawn_bias_refresh()  # a name taught in this turn is recognised from the next one
            if turn.request.close_after and not turn.cancelled:
                log.info("%s: no speech after repeated prompts; closing", self.name)
                await self.conn.close(CLOSE_NORMAL, "no speech; goodbye")
                return

    def _cancel_all_replies(self) -> ReplyTurn | None:
        for queued in self._replies:
            queued.cancelled = True
            self._settle_announcement(queued)
        self._replies.clear()
        current = self._current
        if current is not None:
            current.cancelled = True
        return current

    async def _cancel_replies(self, why: str) -> bool:
        """Cancel the live turn and everything queued; returns True if a `tts stop` was sent."""
        current = self._cancel_all_replies()
        sent_stop = False
        if current is not None:
            if current.tts_open and not current.stop_sent:
                current.stop_sent = True
                await self.send_tts_stop(f"{current} cancelled: {why}")
                sent_stop = True
            if self._current_task is not None:
                self._current_task.cancel()
            log.info("%s: %s cancelled (%s)", self.name, current, why)
        self._update_state(why)
        return sent_stop

    async def _on_abort(self, reason: str | None) -> None:
        log.info("%s: abort (%s)", self.name, reason or "button")
        if not await self._cancel_replies(f"abort {reason or ''}".strip()):
            # Always answer an abort: a device that aborted from speaking waits for it (78 #337).
            await self.send_tts_stop("abort")
