# The real board: machine.I2S mic (32-bit mono, converted to int16 by wren_device.dsp) and speaker,
# BOOT button with debounce, WS2812/PWM LED, network.WLAN. Not importable on the host (no I2S/Pin there).
import asyncio
import sys
import time

import machine
import network
from machine import I2S, Pin
from wren_device.log import log

from hal.esp32.pins import BOARDS

MIC_RATE = 16000
_DEBOUNCE_MS = 30


class Button:
    # Active-low push button: the IRQ only sets a ThreadSafeFlag (the one IRQ -> loop bridge); the task
    # waits for the level to stay put for the debounce time before reporting it.
    def __init__(self, pin_no):
        self.pin = Pin(pin_no, Pin.IN, Pin.PULL_UP)
        self._flag = asyncio.ThreadSafeFlag()

    def start(self, callback):
        self.pin.irq(lambda p: self._flag.set(), Pin.IRQ_FALLING | Pin.IRQ_RISING)
        asyncio.create_task(self._run(callback))

    async def _run(self, callback):
        pressed = False
        while True:
            await self._flag.wait()
            await asyncio.sleep_ms(_DEBOUNCE_MS)
            now = self.pin.value() == 0
            if now != pressed:
                pressed = now
                callback("press" if now else "release")


class Led:
    def __init__(self, pin_no, kind):
        self.kind = kind
        if kind == "neopixel":
            import neopixel

            self.np = neopixel.NeoPixel(Pin(pin_no, Pin.OUT), 1)
        else:
            self.pwm = machine.PWM(Pin(pin_no), freq=1000, duty_u16=0)

    def set_rgb(self, r, g, b):
        if self.kind == "neopixel":
            self.np[0] = (r, g, b)
            self.np.write()
        else:  # single-colour LED: brightness from the luminance
            self.pwm.duty_u16((r * 77 + g * 150 + b * 29) * 257 // 256)


class Display:
    # An SSD1306 OLED on I2C, when the pin map names one ("display": {"kind": "ssd1306", "sda": 41,
    # "scl": 42, "width": 128, "height": 32}, as xiaozhi's bread-compact-wifi); its driver is
    # micropython-lib's ssd1306 (`mpremote mip install ssd1306`). Text in 8x8 cells, wrapped.
    def __init__(self, d):
        import ssd1306

        w, h = d.get("width", 128), d.get("height", 32)
        self.oled = ssd1306.SSD1306_I2C(w, h, machine.I2C(0, sda=Pin(d["sda"]), scl=Pin(d["scl"])))
        self.cols, self.rows = w // 8, h // 8

    def show(self, lines):
        rows = []
        for line in lines:
            rows += [line[i : i + self.cols] for i in range(0, len(line) or 1, self.cols)]
        self.oled.fill(0)
        for y, text in enumerate(rows[: self.rows]):
            self.oled.text(text, 0, 8 * y)
        self.oled.show()


def _display(p):
    # None unless the pin map names a display (the breadboards above have none): a missing one is fine.
    d = p.get("display")
    if not d:
        return None
    try:
        return Display(d) if d.get("kind") == "ssd1306" else None
    except (ImportError, OSError, ValueError) as e:
        log("board", "no display (%r)" % e)
        return None


class Esp32Board:
    def __init__(self, cfg):
        name = cfg.get("board", "esp32s3-breadboard")
        if name not in BOARDS:
            raise ValueError("unknown board %r; known: %s" % (name, ", ".join(BOARDS)))
        self.name = name
        self.pins = p = BOARDS[name]
        self.chip = "esp32s3" if "s3" in sys.implementation._machine.lower() else "esp32"
        try:
            machine.freq(240000000)  # generic images boot at 160 MHz (notes §1.5)
        except ValueError:
            pass
        m = p["mic"]
        # Create I2S early, before the GC heap grows: DMA buffers come from the IDF heap (notes §1.3).
        self.mic = I2S(m["id"], sck=Pin(m["sck"]), ws=Pin(m["ws"]), sd=Pin(m["sd"]), mode=I2S.RX,
                       bits=32, format=I2S.MONO, rate=MIC_RATE, ibuf=p["mic_ibuf"])
        self._spk = None
        self._spk_rate = 0
        self.speaker_buffer_ms = p["spk_ibuf"] * 1000 // (2 * 24000)
        self.button = Button(p["button"])
        self.led = Led(p["led"], p["led_kind"])
        self.display = _display(p)

    def state_changed(self, old, new):
        pass  # the one LED belongs to the self.light.set_rgb tool, so states are not shown on it

    def mic_active(self, on):
        pass  # the I2S mic runs all the time; the app reads it continuously and sends only when listening

    def speaker(self, rate):
        if self._spk is None or rate != self._spk_rate:
            s = self.pins["spk"]
            if self._spk is not None:
                self._spk.deinit()
            self._spk = I2S(s["id"], sck=Pin(s["sck"]), ws=Pin(s["ws"]), sd=Pin(s["sd"]), mode=I2S.TX,
                            bits=16, format=I2S.MONO, rate=rate, ibuf=self.pins["spk_ibuf"])
            self._spk_rate = rate
            self.speaker_buffer_ms = self.pins["spk_ibuf"] * 1000 // (2 * rate)
        return self._spk

    def speaker_drained(self):
        pass

    def set_clock(self, unix_ms, offset_min):
        # The OTA reply's server_time: the RTC is set to local time (what xiaozhi boards show and use).
        secs = unix_ms // 1000 + offset_min * 60
        if time.gmtime(0)[0] == 2000:  # an image whose epoch is 2000-01-01
            secs -= 946684800
        y, mo, d, h, mi, s, wd = time.gmtime(secs)[:7]  # 8 items on the board, 9 on the unix port
        machine.RTC().datetime((y, mo, d, wd, h, mi, s, 0))
        log("clock", "set to %04d-%02d-%02d %02d:%02d:%02d (UTC%+d min)" % (y, mo, d, h, mi, s, offset_min))

    def wlan(self):
        return network.WLAN(network.WLAN.IF_STA)

    def mac(self):
        return self.wlan().config("mac")

    def reboot(self):
        log("board", "reboot")
        time.sleep_ms(200)
        machine.reset()

    def info(self):
        import esp

        return {"chip_model_name": self.chip, "flash_size": esp.flash_size(), "cores": 2}

    def close(self):
        pass


def config_path():
    return "/config.json"


def state_path():
    return "/state.json"


def sounds_path():
    return "/digits.wdg"  # the pairing-code sounds (make deploy; the Wren build has them frozen)


def make_board(cfg):
    return Esp32Board(cfg)


def on_fatal(exc):
    # An unattended device should come back by itself: print why, then reboot after a pause.
    sys.print_exception(exc)
    log("boot", "fatal error; rebooting in 10 s")
    time.sleep(10)
    machine.reset()
