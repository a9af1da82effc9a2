# Sample loops in viper: no allocation, ~50-100x faster than plain Python (notes §4.4, §7.4).
# Viper ints are 64-bit on the host and 32-bit on the ESP32, and ptr16/ptr32 loads zero-extend, so every
# signed value is rebuilt from 16-bit halves with (x ^ 0x8000) - 0x8000, which is correct on both.
import micropython


@micropython.viper
def xor_mask(buf: ptr8, n: int, key: ptr8):  # noqa: F821 (viper pointer types)
    # RFC 6455 §5.3 client masking, in place.
    i = 0
    while i < n:
        buf[i] = buf[i] ^ key[i & 3]
        i += 1


@micropython.viper
def i32_to_i16(buf: ptr16, nsamples: int):  # noqa: F821 (viper pointer types)
    # INMP441 on a 32-bit I2S slot -> int16, in place (output sample i overwrites input halfword i).
    # Same scaling as xiaozhi no_audio_codec.cc: v >> 12 with int16 clamp (notes §1.2).
    i = 0
    while i < nsamples:
        lo = buf[2 * i]
        hi = buf[2 * i + 1]
        v = (((hi ^ 0x8000) - 0x8000) << 4) | (lo >> 12)
        if v > 32767:
            v = 32767
        elif v < -32768:
            v = -32768
        buf[i] = v & 0xFFFF
        i += 1


@micropython.viper
def scale_i16(buf: ptr16, nsamples: int, gain_q12: int):  # noqa: F821 (viper pointer types)
    # Playback volume: scale by gain/4096 with clamping, in place. I2S.shift would wrap, not saturate.
    i = 0
    while i < nsamples:
        s = ((buf[i] ^ 0x8000) - 0x8000) * gain_q12
        v = s >> 12
        if v > 32767:
            v = 32767
        elif v < -32768:
            v = -32768
        buf[i] = v & 0xFFFF
        i += 1


@micropython.viper
def fill_zero(buf: ptr8, start: int, end: int):  # noqa: F821 (viper pointer types)
    i = start
    while i < end:
        buf[i] = 0
        i += 1


@micropython.viper
def copy_bytes(dst: ptr8, dst_off: int, src: ptr8, src_off: int, n: int):  # noqa: F821 (viper pointer types)
    i = 0
    while i < n:
        dst[dst_off + i] = src[src_off + i]
        i += 1


def volume_to_gain(volume):
    # 0..100 -> Q12 gain; a squared curve so equal steps sound roughly equal (100 = unity).
    if volume <= 0:
        return 0
    if volume >= 100:
        return 4096
    return (volume * volume * 4096) // 10000
