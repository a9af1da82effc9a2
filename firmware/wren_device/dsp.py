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


@micropython.viper
def adpcm_decode(src: ptr8, nbytes: int, dst: ptr16, st: ptr16, steps: ptr16, rates: ptr16) -> int:  # noqa: F821
    # IMA ADPCM (low nibble first) at rates[0] Hz -> int16 at rates[1] Hz (>= rates[0]: 16 -> 16 or
    # 24 kHz), linearly interpolated between decoded samples. st = [predictor, step index, previous
    # sample, output phase in 1/rates[1] of an input sample], samples as unsigned halfwords (ptr16 loads
    # zero-extend); all zero starts a clip. -> samples written to dst (at most nbytes * 2 * ceil(ratio)).
    pred = (st[0] ^ 0x8000) - 0x8000
    index = st[1]
    prev = (st[2] ^ 0x8000) - 0x8000
    phase = st[3]
    step_in = rates[0]
    out_rate = rates[1]
    o = 0
    i = 0
    while i < 2 * nbytes:
        code = src[i >> 1]
        if i & 1:
            code = code >> 4
        code = code & 15
        step = steps[index]
        diff = step >> 3
        if code & 4:
            diff += step
        if code & 2:
            diff += step >> 1
        if code & 1:
            diff += step >> 2
        if code & 8:
            pred -= diff
        else:
            pred += diff
        if pred > 32767:
            pred = 32767
        elif pred < -32768:
            pred = -32768
        if code & 4:
            index += (code & 3) * 2 + 2
        else:
            index -= 1
        if index < 0:
            index = 0
        elif index > 88:
            index = 88
        while phase < out_rate:  # the output samples between prev and pred
            dst[o] = (prev + (pred - prev) * phase // out_rate) & 0xFFFF
            o += 1
            phase += step_in
        phase -= out_rate
        prev = pred
        i += 1
    st[0] = pred & 0xFFFF
    st[1] = index
    st[2] = prev & 0xFFFF
    st[3] = phase
    return o
