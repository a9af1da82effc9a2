# Test-only stand-in for the ESP32 `machine` module: records how hal/esp32 drives the hardware.
from umachine import *  # noqa: F403

log = []


class Pin:
    IN = 1
    OUT = 2
    PULL_UP = 3
    IRQ_FALLING = 4
    IRQ_RISING = 8

    def __init__(self, no, mode=None, pull=None):
        self.no = no
        self.level = 1
        self.handler = None

    def value(self, v=None):
        if v is None:
            return self.level
        self.level = v

    def irq(self, handler=None, trigger=0):
        self.handler = handler


class I2S:
    RX = 0
    TX = 1
    MONO = 0
    STEREO = 1

    def __init__(self, id, **kw):
        self.id = id
        self.kw = kw
        log.append(("I2S", id, kw["mode"], kw["bits"], kw["rate"], kw["sck"].no, kw["ws"].no, kw["sd"].no,
                    kw["ibuf"]))

    def deinit(self):
        log.append(("deinit", self.id))


class PWM:
    def __init__(self, pin, freq=0, duty_u16=0):
        self.duty = duty_u16

    def duty_u16(self, d):
        self.duty = d
        log.append(("pwm", d))


def freq(hz=None):
    log.append(("freq", hz))


def reset():
    log.append(("reset",))


class RTC:
    def datetime(self, dt=None):
        log.append(("rtc", list(dt)))


class I2C:
    def __init__(self, id, sda=None, scl=None):
        log.append(("I2C", id, sda.no, scl.no))
