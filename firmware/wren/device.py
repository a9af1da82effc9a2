# The device state machine (reference §5, §8): idle, connecting, listening, speaking, with the channel
# (WebSocket + hello) opened lazily on the first interaction and reused across turns.
import asyncio
import gc
import time
from collections import deque

from shared_protocol import ProtocolError, UnknownMessageType, messages
from wren import VERSION, tools
from wren.audio import FRAME_MS, MIC_RATE, Downlink, Uplink
from wren.codec import make_codec
from wren.log import log
from wren.mcp import McpServer
from wren.ws import WebSocket, WsClosed

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
_HELLO_TIMEOUT_MS = 10000  # §3.2


def system_info(cfg, board, identity, ssid):
    # The §6.2 body (also the result of self.get_system_info).
    info = board.info()
    return {
        "version": 2,
        "language": cfg.get("language", "en-US"),
        "flash_size": info.get("flash_size", 0),
        "minimum_free_heap_size": str(gc.mem_free()),
        "mac_address": identity["device_id"],
        "uuid": identity["client_id"],
        "chip_model_name": info.get("chip_model_name", "esp32s3"),
        "chip_info": {"model": 0, "cores": info.get("cores", 2), "revision": 0, "features": 0},
        "application": {"name": "wren", "version": VERSION, "compile_time": "", "idf_version": "",
                        "elf_sha256": ""},
        "partition_table": [],
        "ota": {"label": "factory"},
        "board": {"type": identity["board"], "name": identity["board"], "ssid": ssid or "",
                  "rssi": 0, "channel": 0, "ip": "", "mac": identity["device_id"]},
    }


class Device:
    def __init__(self, cfg, board, identity, url, token, version, ssid=None):
        self.cfg = cfg
        self.board = board
        self.identity = identity
        self.url = url
        self.token = token
        self.version = version
        self.ssid = ssid
        self.mode = cfg["listen_mode"]
        self.state = IDLE
        self.codec = make_codec(cfg.get("opus", True))
        # Buffers first, while the heap is still in one piece (notes §4.4).
        self.ws = WebSocket(max_message=cfg.get("max_message", 8192))
        self.uplink = Uplink(self.codec, version)
        self.downlink = Downlink(self.codec, version, cfg.get("max_downlink_rate", 16000),
                                 cfg.get("downlink_buffer_ms", 1200))
        self.volume = cfg.get("volume", 70)
        self.downlink.set_volume(self.volume)
        self.session_id = ""
        self.channel_open = False
        self.mic_open = False
        self.last_rx = time.ticks_ms()
        self.heap_peak = 0  # gc.mem_alloc() sampled every audio frame (includes garbage not yet collected)
        self.live_peak = 0  # gc.mem_alloc() right after a collection at the end of each turn
        self._hello = asyncio.Event()
        self._events = deque((), 8)  # button events; bounded, the oldest is dropped
        self._wake = asyncio.Event()
        self._audio = asyncio.Event()
        self._playing = False
        self._spk_writer = None
        self._finished = False
        self._dropped_audio = 0
        self._receiver = None
        self.mcp = McpServer(identity["board"], VERSION)
        tools.register(self.mcp, self)

    # ---- state ---------------------------------------------------------------------------------------
    def _set(self, new):
        if new == self.state:
            return True
        if new not in _ALLOWED[self.state]:
            log("state", "refused %s -> %s" % (self.state, new))
            return False
        log("state", "%s -> %s" % (self.state, new))
        self.state = new
        return True

    # ---- main loop -----------------------------------------------------------------------------------
    async def run(self):
        tasks = [asyncio.create_task(self._mic_task()), asyncio.create_task(self._speaker_task()),
                 asyncio.create_task(self._watchdog())]
        self.board.button.start(self._on_button)
        log("device", "ready: mode %s, codec %s, protocol v%d" % (self.mode, self.codec.format, self.version))
        try:
            while not self._finished:
                while self._events and not self._finished:
                    await self._handle_button(self._events.popleft())
                if self._finished:
                    break
                await self._wake.wait()
                self._wake.clear()
        finally:
            for t in tasks:
                t.cancel()
            await self.ws.close()
            self.board.close()
            self.report_heap()

    def report_heap(self):
        gc.collect()
        log("heap", "high-water %d bytes allocated (sampled per frame), live peak %d bytes after turns, "
            "heap %d bytes" % (self.heap_peak, self.live_peak, gc.mem_alloc() + gc.mem_free()))

    def _on_button(self, kind):
        self._events.append(kind)
        self._wake.set()

    async def _handle_button(self, kind):
        s = self.state
        if kind == "press":
            if s == IDLE:
                await self._start_listening()
            elif s == LISTENING and self.mode != "manual":
                log("device", "button while listening: closing the channel")  # §8.2 step 7
                await self._close_channel()
            elif s == SPEAKING:
                await self._send(messages.abort(self.session_id))  # button abort: no reason key (§5.2)
                if self.mode == "manual":
                    self._stop_playback()
                    await self._start_listening()
        elif kind == "release" and s == LISTENING and self.mode == "manual":
            self._mic(False)
            await self._send(messages.listen_stop(self.session_id))
            self._set(IDLE)

    async def _start_listening(self):
        if self.state == IDLE and not self._channel_usable():
            self._set(CONNECTING)
            if not await self._open_channel():
                self._set(IDLE)
                return
        if await self._send(messages.listen_start(self.session_id, self.mode)):
            self._set(LISTENING)
            self._mic(True)
        else:
            self._set(IDLE)

    def _mic(self, on):
        self.mic_open = on
        self.board.mic_active(on)

    # ---- channel -------------------------------------------------------------------------------------
    def _channel_usable(self):
        return self.channel_open and self.ws.open

    async def _open_channel(self):
        delay = 500
        attempts = self.cfg.get("connect_attempts", 6)
        for attempt in range(1, attempts + 1):
            try:
                await self._connect_once()
                return True
            except (WsClosed, OSError, asyncio.TimeoutError, ValueError) as e:
                log("channel", "attempt %d/%d failed: %r" % (attempt, attempts, e))
            if attempt < attempts:
                log("channel", "reconnect in %d ms" % delay)
                await asyncio.sleep_ms(delay)
                delay = min(delay * 2, 8000)
        return False

    def _headers(self):
        h = {"Protocol-Version": str(self.version), "Device-Id": self.identity["device_id"],
             "Client-Id": self.identity["client_id"]}
        if self.token:
            h["Authorization"] = self.token if " " in self.token else "Bearer " + self.token
        return h

    async def _connect_once(self):
        await self._drop_connection()
        log("channel", "connecting to", self.url)
        await self.ws.connect(self.url, self._headers())
        self._hello.clear()
        self._receiver = asyncio.create_task(self._receive_task())
        hello = messages.hello_device(
            version=self.version,
            features={"mcp": True},
            audio_params=messages.audio_params(self.codec.format, MIC_RATE, 1, FRAME_MS),
        )
        await self.ws.send_text(messages.encode(hello))
        await asyncio.wait_for_ms(self._hello.wait(), _HELLO_TIMEOUT_MS)
        if not self.ws.open:
            raise WsClosed(1006, "closed before the server hello")
        self.channel_open = True
        self.last_rx = time.ticks_ms()
        log("channel", "open, session", self.session_id)

    async def _drop_connection(self):
        self.channel_open = False
        if self._receiver is not None:
            self._receiver.cancel()
            self._receiver = None
        await self.ws.close()

    async def _close_channel(self):
        self._mic(False)
        await self._drop_connection()
        self._channel_lost("closed by the device")

    def _channel_lost(self, why):
        self.channel_open = False
        self._mic(False)
        self._stop_playback()
        if self.state != IDLE:
            log("channel", "lost (%s): going idle" % why)
            self._set(IDLE)

    async def _send(self, msg):
        try:
            await self.ws.send_text(messages.encode(msg))
            return True
        except WsClosed as e:
            log("channel", "send failed:", e.reason)  # §8.3: a failed text send ends the session
            self._channel_lost("send failed")
            return False

    # ---- receiving -----------------------------------------------------------------------------------
    async def _receive_task(self):
        try:
            while True:
                op, data = await self.ws.recv()
                self.last_rx = time.ticks_ms()
                try:
                    if op == 2:
                        self._on_audio(data)
                    else:
                        await self._on_text(data)
                except WsClosed:
                    raise
                except Exception as e:  # one bad frame (or a MemoryError) must not end the session
                    log("recv", "error handling a frame:", repr(e))
        except WsClosed as e:
            log("channel", "closed by the server: %d %s" % (e.code, e.reason))
            self._receiver = None
            self._hello.set()  # wake a connect still waiting for the hello
            self._channel_lost("closed")

    def _on_audio(self, data):
        if self.state != SPEAKING:
            self._dropped_audio += 1  # §5.5: binary audio only while speaking
            return
        self.downlink.feed(data)
        self._audio.set()

    async def _on_text(self, data):
        try:
            msg = messages.parse(data)
        except UnknownMessageType as e:
            log("recv", "ignored:", e)
            return
        except ProtocolError as e:
            log("recv", "malformed server frame ignored:", e)
            return
        t = msg["type"]
        if t == "hello":
            self._on_hello(msg)
        elif t == "mcp":
            reply = self.mcp.handle(msg["payload"])
            if reply is not None:
                await self._send(messages.mcp(reply, self.session_id))
        elif t == "tts":
            await self._on_tts(msg)
        elif t == "stt":
            log("stt", msg.get("text", ""))
        elif t == "llm":
            log("llm", "emotion", msg.get("emotion"))
        elif t == "system" and msg.get("command") == "reboot":
            self.board.reboot()
        elif t == "alert":
            log("alert", msg.get("status"), msg.get("message"))
        else:
            log("recv", "ignored", t)

    def _on_hello(self, msg):
        if msg.get("transport") != "websocket":
            log("recv", "hello without transport websocket ignored")
            return
        if isinstance(msg.get("session_id"), str):
            self.session_id = msg["session_id"]
        rate, frame_ms = messages.downlink_audio(msg)
        if not self.downlink.configure(rate, frame_ms):
            log("recv", "hello ignored: downlink %d Hz > max_downlink_rate" % rate)
            return
        spk = self.board.speaker(rate)
        if self._spk_writer is None or self._spk_writer.s is not spk:
            self._spk_writer = asyncio.StreamWriter(spk, {})
        log("recv", "server hello: downlink %d Hz / %d ms" % (rate, frame_ms))
        self._hello.set()

    async def _on_tts(self, msg):
        st = msg["state"]
        if st == "start":
            if self.state == CONNECTING:
                return
            if self._set(SPEAKING):
                self._dropped_audio = 0
                if self.mode != "realtime":
                    self._mic(False)
        elif st == "sentence_start":
            log("tts", "sentence_start", msg.get("text", ""))
        elif st == "stop" and self.state == SPEAKING:
            log("tts", "stop")
            if self.mode == "manual":
                self._set(IDLE)
            else:
                self._set(LISTENING)
            asyncio.create_task(self._after_playback())

    async def _after_playback(self):
        # §5.1/§9.3: re-arm the mic only after local playback has drained.
        await asyncio.sleep_ms(0)
        while self.downlink.pending() or self._playing:
            await asyncio.sleep_ms(20)
        log("turn", "done; playback drained")
        gc.collect()
        live = gc.mem_alloc()
        if live > self.live_peak:
            self.live_peak = live
        log("heap", "live after turn %d bytes" % live)
        if self.board.turn_done():
            self._finished = True
            self._wake.set()
            return
        if self.mode == "auto" and self.state == LISTENING and self._channel_usable():
            if await self._send(messages.listen_start(self.session_id, "auto")):
                self._mic(True)

    # ---- audio tasks ---------------------------------------------------------------------------------
    async def _mic_task(self):
        reader = asyncio.StreamReader(self.board.mic)
        up = self.uplink
        mv = up.raw_mv
        size = len(up.raw)
        while True:
            got = await reader.readinto(mv) or 0
            while got < size:
                got += await reader.readinto(mv[got:]) or 0
            used = gc.mem_alloc()
            if used > self.heap_peak:
                self.heap_peak = used
            if self.mic_open and self.channel_open:
                n = up.process_mic()
                try:
                    await self.ws.send_binary(up.frame, n)
                except WsClosed:
                    pass  # the receiver task sees the close and handles it

    def _stop_playback(self):
        self.downlink.flush()

    async def _speaker_task(self):
        dl = self.downlink
        while True:
            if not dl.pending() or self._spk_writer is None:
                if self._playing:
                    await asyncio.sleep_ms(self.board.speaker_buffer_ms)  # the DMA buffer plays out
                    if dl.pending():
                        continue  # more audio came while the buffer played out
                    self._playing = False
                    self.board.speaker_drained()
                # Clear, re-check, then wait: no wake-up from feed() can be lost in between.
                self._audio.clear()
                if not dl.pending():
                    await self._audio.wait()
                continue
            self._playing = True
            dl.next_chunk()
            w = self._spk_writer
            w.write(dl.chunk)
            await w.drain()
            used = gc.mem_alloc()
            if used > self.heap_peak:
                self.heap_peak = used

    async def _watchdog(self):
        limit = self.cfg.get("channel_timeout_s", 120) * 1000
        while True:
            await asyncio.sleep_ms(1000)
            if self.channel_open and time.ticks_diff(time.ticks_ms(), self.last_rx) > limit:
                log("channel", "no data for %d s: treated as closed" % (limit // 1000))  # §8.3
                self._channel_lost("inactivity")

    # ---- tool backends -------------------------------------------------------------------------------
    def status(self):
        rssi = -50
        try:
            rssi = self.board.wlan().status("rssi")
        except Exception:
            pass
        signal = "strong" if rssi > -60 else ("medium" if rssi > -75 else "weak")
        return {"audio_speaker": {"volume": self.volume},
                "network": {"type": "wifi", "ssid": self.ssid or "", "signal": signal}}

    def set_volume(self, volume):
        self.volume = volume
        self.downlink.set_volume(volume)
        log("volume", volume)
        return True

    def set_rgb(self, r, g, b):
        self.board.led.set_rgb(r, g, b)
        return True

    def system_info(self):
        return system_info(self.cfg, self.board, self.identity, self.ssid)
