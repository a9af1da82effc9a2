import machine


class NeoPixel:
    def __init__(self, pin, n):
        self.px = [(0, 0, 0)] * n

    def __setitem__(self, i, v):
        self.px[i] = v

    def write(self):
        machine.log.append(("neopixel", self.px[0]))
