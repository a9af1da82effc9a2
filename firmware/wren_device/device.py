# The device state machine (reference §5, §8): idle, connecting, listening, speaking. The channel
# (wren_device.channel) is opened on the first interaction and reused across turns; audio runs in two
# tasks over the preallocated paths of wren_device.audio.
import asyncio
import gc
from collections import deque

from shared_protocol import ProtocolError, UnknownMessageType, messages
from shared_protocol import constants as wire
from wren_device import VERSION, tools
from wren_device.audio import FRAME_MS, MIC_RATE, Downlink, Uplink
from wren_device.audio_tasks import mic_task, speaker_task
from wren_device.channel import Channel
from wren_device.codec import make_codec
from wren_device.config import downlink_rate
from wren_device.keeper import Keeper
from wren_device.log import log
from wren_device.mcp import McpServer
from wren_device.ws import WebSocket

IDLE = "idle"
CONNECTING = "connecting"
LISTENING = "listening"
SPEAKING = "speaking"
# §8.1 allowed transitions; anything else is refused and logged.
_ALLOWED = {
    IDLE: (CONNECTING, LISTENING, SPEAKING),
    CONNECTING: (IDLE, LISTENING),
    LISTENING: (SPEAKING, IDLE),
    SPEAKING: (LISTENING, IDLE),
}


class Device:
    def __init__(self, cfg, board, identity, url, token, version, ssid=None, codec=None, paths=None):
        # paths: (Uplink, Downlink, WebSocket) made early by the caller, or None to make them here.
        self.cfg = cfg
        self.board = board
        self.identity = identity
        self.version = version
        self.ssid = ssid
        self.mode = cfg["listen_mode"]
        self.state = IDLE
        self.codec = codec or make_codec(cfg.get("opus", True))
        if paths is None:
            paths = (Uplink(self.codec, version),
                     Downlink(self.codec, version, downlink_rate(cfg, self.codec.format),
                              cfg.get("downlink_buffer_ms", 1000)),
                     WebSocket(max_message=cfg.get("max_message", 8192)))
        self.uplink, self.downlink, ws = paths
        hello = messages.hello_device(
            version=version,
            features={"mcp": True},
            audio_params=messages.audio_params(self.codec.format, MIC_RATE, 1, FRAME_MS),
        )
        self.channel = Channel(cfg, identity, url, token, version, hello, self, ws)
        self.keeper = Keeper(self.channel, cfg.get("channel_timeout_s", 120), self._on_button, self.on_closed)
        self.volume = cfg.get("volume", 70)
        self.downlink.set_volume(self.volume)
        self.mic_open = False
        self.heap_peak = 0  # gc.mem_alloc() sampled every audio frame (includes garbage not yet collected)
        self.live_peak = 0  # gc.mem_alloc() right after a collection at the end of each turn
        self._events = deque((), 8)  # button events; bounded, the oldest is dropped
        self._wake = asyncio.Event()
        self.playing = False
        self.speaker = None  # the board's speaker stream, from the accepted server hello
        self._stopping = False  # the board asked the app to end (hal/README.md)
        self._turn_end = None  # the task that finishes the last reply (_after_playback)
        self.dropped_audio = 0
        self.mcp = McpServer(identity["board"], VERSION)
        tools.register(self.mcp, self)

    @property
    def session_id(self):
        return self.channel.session_id

    def _set(self, new):
        if new == self.state:
            return True
        if new not in _ALLOWED[self.state]:
            log("state", "refused %s -> %s" % (self.state, new))
            return False
        log("state", "%s -> %s" % (self.state, new))
        old, self.state = self.state, new
        self.board.state_changed(old, new)
        return True

    # ---- main loop: button events, one at a time, until the board says stop ------------------------------
    async def run(self):
        tasks = [asyncio.create_task(mic_task(self)), asyncio.create_task(speaker_task(self)),
                 asyncio.create_task(self.keeper.run())]
        self.board.button.start(self._on_button)
        log("device", "ready: mode %s, codec %s, protocol v%d" % (self.mode, self.codec.format, self.version))
        try:
            while not self._stopping:
                while self._events and not self._stopping:
                    await self._handle_button(self._events.popleft())
                if not self._stopping:
                    await self._wake.wait()
                    self._wake.clear()
            if self._turn_end is not None:
                await self._turn_end  # a reply that just ended plays out (and is accounted) first
        finally:
            for t in tasks:
                t.cancel()
            await self.channel.drop()
            self.board.close()
            self.report_heap()

    def report_heap(self):
        gc.collect()
        log("heap", "high-water %d bytes allocated (sampled per frame), live peak %d bytes after turns, "
            "heap %d bytes" % (self.heap_peak, self.live_peak, gc.mem_alloc() + gc.mem_free()))

    def _on_button(self, kind):
        # The board's input (hal/README.md): press, release or stop; "reopen" comes from the keeper.
        if kind == "stop":
            self._stopping = True
        self._events.append(kind)
        self._wake.set()

    async def _handle_button(self, kind):
        s = self.state
        if kind == "press":
            if s == IDLE:
                await self._start_listening()
            elif s == LISTENING and self.mode != wire.MODE_MANUAL:
                log("device", "button while listening: closing the channel")  # §8.2 step 7
                self._mic(False)
                await self.channel.drop()
                self.on_closed("closed by the device")
            elif s == SPEAKING:
                await self.channel.send(messages.abort(self.session_id))  # button abort: no reason (§5.2)
                self.downlink.flush()  # stop talking now; the state waits for the server's tts stop
                if self.mode == wire.MODE_MANUAL:  # push-to-talk: abort and listen at once
                    await self._start_listening()
        elif kind == "release" and s == LISTENING and self.mode == wire.MODE_MANUAL:
            self._mic(False)
            # Idle before the send: a fast server's `tts start` can be read while `listen stop` is in
            # flight, and must find the device idle (-> speaking), not be undone after it.
            self._set(IDLE)
            await self.channel.send(messages.listen_stop(self.session_id))
        elif kind == "reopen" and s == IDLE and not self.channel.usable():  # a timer is pending (keeper)
            self._set(CONNECTING)
            self.keeper.reopened(await self.channel.open())
            self._set(IDLE)

    async def _start_listening(self):
        if self.state == IDLE and not self.channel.usable():
            self._set(CONNECTING)
            if not await self.channel.open():
                self._set(IDLE)
                return
        # Listening before the send, as on release: a `tts start` read while `listen start` is in flight
        # (a timer going off as the button is pressed) must find the device listening, not be undone.
        if not self._set(LISTENING):
            return
        if not await self.channel.send(messages.listen_start(self.session_id, self.mode)):
            self._set(IDLE)
        elif self.state == LISTENING:
            self._mic(True)

    def _mic(self, on):
        self.mic_open = on
        self.board.mic_active(on)

    # ---- channel callbacks ---------------------------------------------------------------------------
    def on_closed(self, why):
        self._mic(False)
        self.downlink.flush()
        self.keeper.lost()
        if self.state != IDLE:
            log("channel", "lost (%s): going idle" % why)
            self._set(IDLE)

    def on_audio(self, buf, n):
        if self.state != SPEAKING:
            self.dropped_audio += 1  # §5.5: binary audio only while speaking
            return
        self.downlink.feed(buf, n)  # audio_tasks.speaker_task picks it up

    async def on_frame(self, op, data):
        try:
            msg = messages.parse(data)
        except UnknownMessageType as e:
            self.keeper.on_unknown(e, data)  # wren_timers, or logged and ignored
            return
        except ProtocolError as e:
            log("recv", "malformed server frame ignored:", e)
            return
        t = msg["type"]
        if t == wire.TYPE_HELLO:
            self._on_hello(msg)
        elif t == wire.TYPE_MCP:
            reply = self.mcp.handle(msg["payload"])
            if reply is not None:
                await self.channel.send(messages.mcp(reply, self.session_id))
        elif t == wire.TYPE_TTS:
            self._on_tts(msg)
        elif t == wire.TYPE_STT:
            log("stt", msg.get("text", ""))
        elif t == wire.TYPE_LLM:
            log("llm", "emotion", msg.get("emotion"))
        elif t == wire.TYPE_SYSTEM and msg.get("command") == wire.SYSTEM_REBOOT:
            self.board.reboot()
        elif t == wire.TYPE_ALERT:
            log("alert", msg.get("status"), msg.get("message"))
        else:
            log("recv", "ignored", t)

    def _on_hello(self, msg):
        if msg.get("transport") != "websocket":
            log("recv", "hello without transport websocket ignored")
            return
        rate, frame_ms = messages.downlink_audio(msg)
        if not self.downlink.configure(rate, frame_ms):
            log("recv", "hello ignored: downlink %d Hz > max_downlink_rate" % rate)
            return
        self.speaker = self.board.speaker(rate)  # the same object while the rate is unchanged
        log("recv", "server hello: downlink %d Hz / %d ms" % (rate, frame_ms))
        self.channel.hello_accepted(msg)

    def _on_tts(self, msg):
        st = msg["state"]
        if st == wire.TTS_START:
            if self.state != CONNECTING and self._set(SPEAKING):  # ignored while connecting (§5.5)
                self.dropped_audio = 0
                if self.mode != wire.MODE_REALTIME:
                    self._mic(False)
        elif st == wire.TTS_SENTENCE_START:
            log("tts", "sentence_start", msg.get("text", ""))
        elif st == wire.TTS_STOP and self.state == SPEAKING:
            log("tts", "stop")
            self._turn_end = asyncio.create_task(self._after_playback())
            self._set(IDLE if self.mode == wire.MODE_MANUAL else LISTENING)

    async def _after_playback(self):
        # §5.1/§9.3: re-arm the mic only after local playback has drained.
        await asyncio.sleep_ms(0)
        while self.downlink.pending() or self.playing:
            await asyncio.sleep_ms(20)
        dl = self.downlink
        log("turn", "done; playback drained (%d frames, %d dropped)" % (dl.received, dl.dropped))
        gc.collect()  # a quiet point: collect here rather than in the middle of the next utterance
        live = gc.mem_alloc()
        self.live_peak = max(self.live_peak, live)
        log("heap", "live after turn %d bytes" % live)
        if self._stopping or self.mode != wire.MODE_AUTO:
            return
        if self.state == LISTENING and self.channel.usable():
            if await self.channel.send(messages.listen_start(self.session_id, wire.MODE_AUTO)):
                self._mic(True)
