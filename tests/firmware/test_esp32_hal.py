"""hal/esp32 executed on the host against recording stand-ins for `machine` (test-only fakes: there is
no ESP32 here). Checks the pin maps, I2S setup, speaker re-init on a rate change, LED, debounced button, and
the optional display (none on the breadboards; an SSD1306 when the pin map names one)."""

from __future__ import annotations

import json

import pytest

from tests.firmware.conftest import FIRMWARE, REPO, SCRIPTS, micropython

STUBS = SCRIPTS / "esp32_stubs"
PATH = f"{STUBS}:{FIRMWARE}:{FIRMWARE / 'hal' / 'host'}:{REPO}:.frozen"  # host network.WLAN stands in


async def probe(board: str) -> dict:
    async with micropython(str(SCRIPTS / "esp32_board_probe.py"), board, env={"MICROPYPATH": PATH}) as mp:
        assert await mp.finish(30) == 0, mp.output()
    line = next(x for x in mp.lines if x.startswith("PROBE "))
    return json.loads(line[6:])


@pytest.mark.parametrize(
    ("board", "mic_pins", "spk_pins", "led"),
    [
        ("esp32s3-breadboard", [5, 4, 6], [15, 16, 7], ["neopixel", [255, 0, 0]]),
        ("esp32-breadboard", [26, 25, 32], [14, 27, 33], ["pwm", 19711]),
    ],
)
async def test_board_sets_up_i2s_led_and_a_debounced_button(board, mic_pins, spk_pins, led) -> None:
    res = await probe(board)
    i2s = [e for e in res["log"] if e[0] == "I2S"]
    # mic: I2S 1, RX, 32-bit slots at 16 kHz; speaker: I2S 0, TX, 16-bit, re-created on a rate change
    assert i2s[0][1:5] == [1, 0, 32, 16000] and i2s[0][5:8] == mic_pins
    assert i2s[1][1:5] == [0, 1, 16, 24000] and i2s[1][5:8] == spk_pins
    assert i2s[2][1:5] == [0, 1, 16, 16000]
    assert ["deinit", 0] in res["log"]
    assert res["same_speaker"]
    assert ["freq", 240000000] in res["log"]
    assert led in res["log"]
    assert res["events"] == ["press", "release"]  # the bounce produced one press
    assert res["info"]["flash_size"] == 8 * 1024 * 1024
    assert res["buffer_ms"] > 0
    # server_time (Unix ms + timezone minutes) -> the RTC in local time: (y, m, d, weekday, h, m, s, sub)
    assert ["rtc", [2026, 2, 26, 3, 6, 45, 56, 0]] in res["log"]
    assert res["no_display"] and res["sounds"] == "/digits.wdg"
    shown = res["log"][res["log"].index(["oled", 128, 32]):]
    assert shown[:2] == [["oled", 128, 32], ["fill", 0]] and shown[-1] == ["show"]
    assert ["text", "Pairing code 123", 0, 0] in shown and ["text", " 456", 0, 8] in shown  # 16 columns
    assert ["text", "http://box:8000/", 0, 16] in shown
