# MicroPython script (run by firmware_footprint.py under the unix port): cost of the firmware's per-frame
# audio steps, mic -> int16 -> PCM codec -> xiaozhi framing -> WebSocket header + mask, and downlink
# feed -> volume -> jitter ring -> 20 ms speaker chunks; time per 60 ms frame (ticks_us) and heap bytes
# allocated per frame (gc disabled, gc.mem_alloc delta). The fake I2S read is excluded from the time.
# argv: mic.wav out.wav frames
import gc
import sys
import time

from hal.host.fake_i2s import FakeMic, FakeSpeaker
from wren_device import dsp
from wren_device.audio import SAMPLES, Downlink, Uplink
from wren_device.codec import PcmCodec
from wren_device.ws import OP_BINARY, WebSocket

from shared_protocol import audio as framing

mic_path, out_path, FRAMES = sys.argv[1], sys.argv[2], int(sys.argv[3])
mic = FakeMic(mic_path)
mic.active = True
codec = PcmCodec()
up = Uplink(codec, 1)
ws = WebSocket(8192)
spk = FakeSpeaker(out_path, 16000, buffer_ms=1000000)
dl = Downlink(codec, 1)
dl.configure(16000, 60)
dl.set_volume(70)
hs = framing.header_size(1)
rx = bytearray(SAMPLES * 2)  # the receive buffer a 1920-byte message arrives in
time.sleep_ms((3 * FRAMES + 3) * 60 + 100)  # the real-time fake mic then has every frame ready
spent = [0, 0]


def step():
    mic.readinto(up.raw_mv)
    t0 = time.ticks_us()
    n = up.process_mic()
    ws.prepare_frame(OP_BINARY, up.send, n)
    dsp.xor_mask(up.send, n, ws._mask)
    t1 = time.ticks_us()
    for j in range(SAMPLES * 2):  # stands in for the socket read: the uplink PCM comes back as the reply
        rx[j] = up.send[hs + j]
    t2 = time.ticks_us()
    dl.feed(rx, SAMPLES * 2)
    while dl.pending():
        dl.next_chunk()
        spk.write(dl.chunk)
    t3 = time.ticks_us()
    spent[0] += time.ticks_diff(t1, t0)
    spent[1] += time.ticks_diff(t3, t2)


def run(frames):
    for _ in range(frames):
        step()


step()  # warm-up: cached views are made on the first frame
gc.collect()
gc.disable()
run(1)  # warm-up of the loop itself (its first pass allocates once)
spent[0] = spent[1] = 0
a1 = gc.mem_alloc()
run(FRAMES)
a2 = gc.mem_alloc()
run(2 * FRAMES)
a3 = gc.mem_alloc()
gc.enable()
spk.close()
# Steady state: the first calls allocate once (a2 - a1, reported), the last run's bytes per frame count.
per_frame = (a3 - a2) / (2 * FRAMES)
print(f"FRAME-COST frames={3 * FRAMES} uplink_us={spent[0]} downlink_us={spent[1]} "
      f"alloc_per_frame={per_frame} first_call_bytes={a2 - a1}")
