# The simulated board (the contract is firmware/hal/README.md): WAV-file mic in real time, WAV-file
# speaker, scripted or stdin button, LED to the log, loopback Wi-Fi. Every simulation setting lives here,
# none in the app. They come from the environment (set by `make sim` / the tests) or, except for the
# two paths, the "sim" object in config.json:
#   WREN_SIM_CONFIG, WREN_SIM_STATE   config.json / state.json paths (default: in the current directory)
#   WREN_SIM_MIC=path.wav        16 kHz 16-bit mono, played while the device listens
#   WREN_SIM_OUT=reply.wav       what the speaker plays
#   WREN_SIM_BUTTON=press@0.5,release@eof,press@9   times in s since boot; "eof" = 0.3 s after the mic WAV
#                            ran out; "stdin" reads lines p (press), r (release), c (click)
#   WREN_SIM_TURNS=1         end the run after the device has left speaking this many times, once that
#                            reply has played out (0 = run until killed)
#   WREN_SIM_SOUNDS=digits-adpcm.wdg   the pairing-code sounds (tools/firmware/digit_sounds.py)
# The display is stdout: one `display:` line per screen.
import asyncio
import os
import sys
import time

import machine
import network
from wren_device.log import log

from hal.host.fake_i2s import FakeMic, FakeSpeaker


def _setting(cfg, env, key, default):
    value = os.getenv(env)
    if value:
        return value
    return cfg.get("sim", {}).get(key, default)


def config_path():
    return os.getenv("WREN_SIM_CONFIG") or "config.json"


def state_path():
    return os.getenv("WREN_SIM_STATE") or "state.json"


def sounds_path():
    return os.getenv("WREN_SIM_SOUNDS") or "digits.wdg"


class Button:
    def __init__(self, script, board):
        self.script = script
        self.board = board
        self.callback = None

    def start(self, callback):
        self.callback = callback
        if self.script == "stdin":
            asyncio.create_task(self._stdin(callback))
        elif self.script:
            asyncio.create_task(self._scripted(callback))

    def _steps(self):
        steps = []
        for item in self.script.split(","):
            kind, _, at = item.strip().partition("@")
            if kind not in ("press", "release", "click"):
                raise ValueError("button script: unknown action " + repr(kind))
            steps.append((kind, at.strip()))
        return steps

    async def _scripted(self, callback):
        t0 = self.board.t0
        for kind, at in self._steps():
            if at == "eof":
                mic = self.board.mic
                while mic.eof_ms is None:
                    await asyncio.sleep_ms(50)
                due = time.ticks_add(mic.eof_ms, 300)
            else:
                due = time.ticks_add(t0, int(float(at) * 1000))
            wait = time.ticks_diff(due, time.ticks_ms())
            if wait > 0:
                await asyncio.sleep_ms(wait)
            self._fire(callback, kind)

    async def _stdin(self, callback):
        reader = asyncio.StreamReader(sys.stdin)
        while True:
            line = await reader.readline()
            if not line:
                return
            key = line.strip()[:1]
            self._fire(callback, {b"p": "press", b"r": "release", b"c": "click"}.get(key, "click"))

    def _fire(self, callback, kind):
        if kind == "click":
            log("button", "press (simulated)")
            callback("press")
            log("button", "release (simulated)")
            callback("release")
        else:
            log("button", kind, "(simulated)")
            callback(kind)


class Led:
    def set_rgb(self, r, g, b):
        self.rgb = (r, g, b)
        log("led", "rgb", r, g, b)


class Display:
    # A text screen: each screen is one stdout line, its lines joined by " | " (tests read it).
    def show(self, lines):
        self.lines = lines
        log("display", " | ".join(lines))


class HostBoard:
    name = "host-sim"
    chip = "host"
    speaker_buffer_ms = 120

    def __init__(self, cfg):
        self.t0 = time.ticks_ms()
        self.mic = FakeMic(_setting(cfg, "WREN_SIM_MIC", "mic", None))
        self._out = _setting(cfg, "WREN_SIM_OUT", "out", None)
        self._spk = None
        self.button = Button(_setting(cfg, "WREN_SIM_BUTTON", "button", ""), self)
        self.led = Led()
        self.display = Display()
        self.turns_wanted = int(_setting(cfg, "WREN_SIM_TURNS", "turns", "0"))
        self.turns = 0

    def state_changed(self, old, new):
        # Counts the replies (each time the device leaves speaking) and ends the run after the last
        # one asked for: "stop" lets the app play that reply out, close the channel and return.
        if old != "speaking":
            return
        self.turns += 1
        if self.turns_wanted and self.turns == self.turns_wanted and self.button.callback:
            log("sim", "%d turn(s) done: stopping" % self.turns)
            self.button.callback("stop")

    def mic_active(self, on):
        self.mic.active = on

    def speaker(self, rate):
        if self._spk is None:
            self._spk = FakeSpeaker(self._out, rate, self.speaker_buffer_ms)
        elif self._spk.rate != rate:
            log("speaker", "rate change %d -> %d ignored by the WAV writer" % (self._spk.rate, rate))
        return self._spk

    def set_clock(self, unix_ms, offset_min):
        # The OTA reply's server_time; the host's clock is the host's: logged, not set.
        y, mo, d, h, mi, s = time.gmtime(unix_ms // 1000 + offset_min * 60)[:6]
        self.clock = (unix_ms, offset_min)
        log("clock", "server time %04d-%02d-%02d %02d:%02d:%02d (UTC%+d min); host clock left alone"
            % (y, mo, d, h, mi, s, offset_min))

    def speaker_drained(self):
        if self._spk:
            self._spk.flush_header()

    def wlan(self):
        return network.WLAN(network.WLAN.IF_STA)

    def mac(self):
        return self.wlan().config("mac")

    def reboot(self):
        self.close()
        machine.reset()

    def info(self):
        return {"chip_model_name": "host", "flash_size": 0, "cores": 1}

    def close(self):
        if self._spk:
            self._spk.close()


def make_board(cfg):
    return HostBoard(cfg)


def on_fatal(exc):
    raise exc  # the simulation stops with the traceback and a non-zero exit status
