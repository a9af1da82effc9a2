# Runs the per-frame audio steps under micropython.heap_lock(): any allocation raises MemoryError.
#   uplink:   fake I2S mic (32-bit slots) -> int16 -> PCM codec -> xiaozhi framing -> WS header + mask
#   downlink: received WS message view -> framing -> gain (volume) -> jitter ring -> 20 ms chunk -> speaker
# argv: mic.wav out.wav protocol_version volume
import sys
import time

import micropython
from hal.host.fake_i2s import FakeMic, FakeSpeaker
from wren_device import dsp
from wren_device.audio import SAMPLES, Downlink, Uplink
from wren_device.codec import PcmCodec
from wren_device.ws import OP_BINARY, WebSocket

from shared_protocol import audio as framing

mic_path, out_path, version, volume = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
FRAMES = 40

mic = FakeMic(mic_path)
mic.active = True
codec = PcmCodec()
up = Uplink(codec, version)
ws = WebSocket(8192)
spk = FakeSpeaker(out_path, 16000, buffer_ms=100000)
dl = Downlink(codec, 1)
dl.configure(16000, 60)
dl.set_volume(volume)
hs = framing.header_size(version)
rx = ws._view(SAMPLES * 2)  # the receive buffer view a 1920-byte message arrives in (made once)
played = 0
time.sleep_ms(FRAMES * 60 + 100)  # let the real-time mic have every frame ready



def step():
    # One 60 ms frame through both paths; returns the bytes of audio the speaker got.
    global played
    got = mic.readinto(up.raw_mv)
    n = up.process_mic()
    buf = up.frame
    hv = ws.prepare_frame(OP_BINARY, buf, n)
    if not (len(hv) == 8 and hv[1] == 0xFE and (hv[2] << 8 | hv[3]) == n and got == SAMPLES * 4):
        raise AssertionError("bad frame")
    dsp.xor_mask(buf, n, ws._mask)  # unmask (same key, XOR twice) so the payload can be played back
    for j in range(SAMPLES * 2):  # the uplink PCM comes back as the server's reply
        rx[j] = buf[hs + j]
    dl.feed(rx)
    while dl.pending():
        played += dl.next_chunk()
        spk.write(dl.chunk)


step()  # warm-up: the first frame creates the cached views; from then on nothing may allocate


def run(frames):
    # A function, not module level: a new module global would grow the globals dict (an allocation).
    micropython.heap_lock()
    try:
        for _ in range(frames):
            step()
    finally:
        micropython.heap_unlock()


run(FRAMES - 1)

print("FRAMES", FRAMES, "PLAYED", played, "VERSION", version)
spk.close()
print("HEAPLOCK-OK")
