# Exercises firmware/hal/esp32 on the host with recording stand-ins for machine/neopixel/esp.
import asyncio
import json
import sys

import machine
from hal.esp32 import board as esp32_board

board_name = sys.argv[1]
b = esp32_board.make_board({"board": board_name})
spk = b.speaker(24000)
same = b.speaker(24000) is spk
b.speaker(16000)
b.led.set_rgb(255, 0, 0)
events = []


async def main():
    b.button.start(events.append)
    await asyncio.sleep_ms(10)
    pin = b.button.pin
    pin.level = 0  # pressed (active low) ...
    pin.handler(pin)
    pin.handler(pin)  # ... with contact bounce
    await asyncio.sleep_ms(80)
    pin.level = 1
    pin.handler(pin)
    await asyncio.sleep_ms(80)


asyncio.run(main())
b.set_clock(1772084756816, 60)  # an OTA server_time: 2026-02-26 05:45:56 UTC, UTC+1
no_display = b.display is None  # the breadboards name no display
from hal.esp32.pins import BOARDS  # noqa: E402

BOARDS["oled"] = dict(BOARDS[board_name], display={"kind": "ssd1306", "sda": 41, "scl": 42, "width": 128,
                                                   "height": 32})
esp32_board.make_board({"board": "oled"}).display.show(["Pairing code 123 456", "http://box:8000/"])
out = {"log": [list(x) for x in machine.log], "same_speaker": same, "events": events, "info": b.info(),
       "buffer_ms": b.speaker_buffer_ms, "no_display": no_display, "sounds": esp32_board.sounds_path()}
print("PROBE " + json.dumps(out))
