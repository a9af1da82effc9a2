# Test-only stand-in for micropython-lib's ssd1306 driver: records what hal/esp32's display draws.
import machine


class SSD1306_I2C:
    def __init__(self, width, height, i2c):
        machine.log.append(("oled", width, height))

    def fill(self, c):
        machine.log.append(("fill", c))

    def text(self, s, x, y):
        machine.log.append(("text", s, x, y))

    def show(self):
        machine.log.append(("show",))
