# The Wren build's opus module frame by frame, under micropython.heap_lock() (any allocation raises):
# every frame of in.pcm is encoded into one packet store, then every packet decoded into out.pcm, then
# once more through the firmware's own codec (wren_device.codec.OpusCodec) with the uplink's buffers.
# Prints the packet sizes and the per-frame encode/decode times (µs), then HEAPLOCK-OK.
# argv: in.pcm (int16 mono at rate) out.pcm rate bitrate vbr dtx complexity
import array
import sys
import time

import micropython
import opus

in_path, out_path = sys.argv[1], sys.argv[2]
rate, bitrate, vbr, dtx, complexity = [int(a) for a in sys.argv[3:8]]
SAMPLES = rate * 60 // 1000  # one 60 ms frame
FRAME = SAMPLES * 2
MAXP = 1500

with open(in_path, "rb") as f:
    pcm = f.read()
frames = len(pcm) // FRAME
pcm_mv = memoryview(pcm)
out = bytearray(frames * FRAME)
out_mv = memoryview(out)
store = bytearray(frames * MAXP)
store_mv = memoryview(store)
# Every view is made here, before the lock: a slice is an allocation.
pcm_views = [pcm_mv[i * FRAME : (i + 1) * FRAME] for i in range(frames)]
out_views = [out_mv[i * FRAME : (i + 1) * FRAME] for i in range(frames)]
pkt_views = [store_mv[i * MAXP : (i + 1) * MAXP] for i in range(frames)]
sizes = array.array("i", [0] * frames)
enc_us = array.array("i", [0] * frames)
dec_us = array.array("i", [0] * frames)
decoded = array.array("i", [0] * frames)

enc = opus.Encoder(sample_rate=rate, channels=1, duration_ms=60, complexity=complexity, dtx=bool(dtx),
                   bitrate=bitrate, vbr=bool(vbr))
dec = opus.Decoder(sample_rate=rate, channels=1)
assert enc.frame_size == SAMPLES, enc.frame_size


def encode_all():
    for i in range(frames):
        t = time.ticks_us()
        sizes[i] = enc.encode(pcm_views[i], pkt_views[i])
        enc_us[i] = time.ticks_diff(time.ticks_us(), t)


def decode_all():
    for i in range(frames):
        t = time.ticks_us()
        decoded[i] = dec.decode(pkt_views[i], out_views[i], sizes[i])
        dec_us[i] = time.ticks_diff(time.ticks_us(), t)


def firmware_codec():
    # The app's own per-frame calls: Uplink (mic int16 -> packet after a 4-byte framing header) and
    # Downlink (packet -> codec.out), as audio.py makes them.
    for i in range(frames):
        n = codec.encode(pcm_views[i], FRAME, send, 4)
        if codec.decode(pkt_views[i], sizes[i]) != FRAME or n <= 0:
            raise AssertionError(f"firmware codec frame {i}")


def locked(fn):
    # The loops are functions, not module level: a new module global would grow the globals dict (an
    # allocation); and no fn(*args): spreading arguments allocates.
    micropython.heap_lock()
    try:
        fn()
    finally:
        micropython.heap_unlock()


locked(encode_all)
locked(decode_all)
assert all(n == SAMPLES for n in decoded), list(decoded)
with open(out_path, "wb") as f:
    f.write(out)

from wren_device.codec import OpusCodec, make_codec  # noqa: E402

codec = make_codec()
assert isinstance(codec, OpusCodec) and codec.format == "opus"
codec.reset_decoder(rate, 60)
send = bytearray(4 + codec.max_packet(16000, 60))
codec.encode(pcm_views[0], FRAME, send, 4)  # the first call makes the codec's one view of `send`
locked(firmware_codec)

print("SIZES", " ".join(str(n) for n in sizes))
print("ENC_US", " ".join(str(n) for n in enc_us))
print("DEC_US", " ".join(str(n) for n in dec_us))
print("STATE", enc.state_bytes, dec.state_bytes, opus.version())
enc.close()
dec.close()
print("HEAPLOCK-OK")
