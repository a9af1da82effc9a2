# Board pin maps (notes §1.5, from xiaozhi's bread-compact-wifi and bread-compact-esp32 config.h).
# Speaker on I2S 0, mic on I2S 1: each I2S instance is simplex, so they need separate ids and pins.
BOARDS = {
    # ESP32-S3 breadboard: INMP441 mic + MAX98357A amp, WS2812 on GPIO48, BOOT button on GPIO0.
    "esp32s3-breadboard": {
        "mic": {"id": 1, "sck": 5, "ws": 4, "sd": 6},
        "spk": {"id": 0, "sck": 15, "ws": 16, "sd": 7},
        "button": 0,
        "led": 48,
        "led_kind": "neopixel",
        "mic_ibuf": 16384,
        "spk_ibuf": 16384,
    },
    # Plain ESP32 (no PSRAM): same parts; smaller DMA buffers, the IDF heap is tight (notes §1.3, §4.2).
    "esp32-breadboard": {
        "mic": {"id": 1, "sck": 26, "ws": 25, "sd": 32},
        "spk": {"id": 0, "sck": 14, "ws": 27, "sd": 33},
        "button": 0,
        "led": 2,
        "led_kind": "pwm",
        "mic_ibuf": 8192,
        "spk_ibuf": 8192,
    },
}
