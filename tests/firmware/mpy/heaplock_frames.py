# The real audio task bodies, inside a running asyncio loop, for 40 frames under micropython.heap_lock()
# (any allocation raises MemoryError), as MicroPython's own extmod asyncio_heaplock test runs its scheduler:
#   wren_device.audio_tasks.mic_task: host-board mic (32-bit slots, real time) -> int16 -> codec -> framing
#     -> `await ws.send_binary()` (header + viper mask, socket.write(buf, 0, n), one yield)
#   wren_device.channel.Channel._receive: ws.pump() -> Device.on_audio -> Downlink.feed (framing, [Opus
#     packet ring]) ...
#   wren_device.audio_tasks.speaker_task: ... [decode] -> PCM ring -> 20 ms chunks with the volume gain ->
#     the host-board speaker (WAV), write(buf, off, n)
# The socket is an echo "server": every binary frame the device sends comes back as a server frame of the
# same framing version, so what the speaker plays is what the mic heard. Opus packets vary in length.
# argv: mic.wav out.wav protocol_version volume pcm|opus
import asyncio
import io
import sys

import micropython
from hal.host.board import make_board
from wren_device import dsp
from wren_device.audio_tasks import mic_task, speaker_task
from wren_device.device import SPEAKING, Device

mic_path, out_path, version, volume = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
codec_name = sys.argv[5]
FRAMES = 40


class EchoSocket(io.IOBase):
    # The WebSocket's socket. A written client frame (header, then payload) comes back unmasked, with a
    # server header, in `inbox`; readinto(buf, n) reads from there (None: nothing yet, as non-blocking).
    def __init__(self, ws):
        self.ws = ws
        self.inbox = micropython.RingIO(16384)
        self.head = bytearray(4)
        self.scratch = bytearray(8192)
        self.frames = 0
        self.seen = bytearray(256)  # which payload lengths (< 256) went out: Opus packets vary

    def write(self, buf, off=0, n=-1):
        if buf is self.ws._hdr:
            return n
        dsp.copy_bytes(self.scratch, 0, buf, off, n)
        dsp.xor_mask(self.scratch, n, self.ws._mask)  # the same key again: the server unmasks
        h = self.head
        h[0] = 0x82  # FIN + binary
        if n < 126:
            h[1] = n
            self.inbox.write(h, 0, 2)
        else:
            h[1] = 126
            h[2] = n >> 8
            h[3] = n & 0xFF
            self.inbox.write(h, 0, 4)
        self.inbox.write(self.scratch, 0, n)
        self.seen[n if n < 256 else 0] = 1
        self.frames += 1
        return n

    def readinto(self, buf, n=-1):
        return self.inbox.readinto(buf, n) or None

    def ioctl(self, req, arg):
        return (4 | (1 if self.inbox.any() else 0)) if req == 3 else -1


cfg = {"listen_mode": "realtime", "volume": volume, "sim": {"mic": mic_path, "out": out_path},
       "opus": codec_name == "opus"}
board = make_board(cfg)
identity = {"device_id": "02:00:00:00:00:01", "client_id": "c", "board": "host-sim", "version": "t",
            "language": "en-US"}
dev = Device(cfg, board, identity, "ws://echo/", "", version)
if dev.codec.format != codec_name:
    raise SystemExit("codec " + codec_name + " asked, " + dev.codec.format + " found")
ws = dev.channel.ws
sock = EchoSocket(ws)
ws._r = ws._w = asyncio.StreamWriter(sock, {})
ws.open = True
dev.channel.ready = True
dev.downlink.configure(16000, 60)  # the echoed uplink is 16 kHz
dev.speaker = board.speaker(16000)
dev.state = SPEAKING  # audio is played only while speaking; realtime: the mic streams meanwhile
board.mic_active(True)
dev.mic_open = True


def counts():
    return sock.frames, dev.downlink.received, dev.speaker.written


async def prebuffer(frames):
    # What a paced server sends ahead of playback (docs/server.md "Pacing": the first 6 frames at once):
    # silence through the real uplink, echoed. The device then never runs dry while the echo keeps up
    # (running dry is the end of a reply: the host board then rewrites its WAV header, which allocates).
    up = dev.uplink
    for _ in range(frames):
        for j in range(len(up.raw)):
            up.raw[j] = 0
        await ws.send_binary(up.send, up.process_mic())


async def main():
    await prebuffer(6)
    tasks = [asyncio.create_task(mic_task(dev)),
             asyncio.create_task(dev.channel._receive()),
             asyncio.create_task(speaker_task(dev))]
    await asyncio.sleep_ms(600)  # warm-up: what is made once (pollers' result tuples, ...) is made now
    before = counts()
    micropython.heap_lock()
    try:
        await asyncio.sleep_ms(FRAMES * 60)
    finally:
        micropython.heap_unlock()
    after = counts()
    alive = [not t.done() for t in tasks]
    for t in tasks:
        t.cancel()
    await asyncio.sleep_ms(0)
    sent, received, played = after[0] - before[0], after[1] - before[1], after[2] - before[2]
    print("LOCKED SENT", sent, "RECEIVED", received, "PLAYED", played, "ALIVE", alive, "BAD",
          dev.downlink.bad, "DROPPED", dev.downlink.dropped, "LENGTHS", sum(sock.seen))
    # Real time on a shared machine: about FRAMES frames each way, at least three quarters of them.
    if all(alive) and min(sent, received) >= FRAMES * 3 // 4 and played >= FRAMES * 3 // 4 * 1920:
        print("HEAPLOCK-OK")


asyncio.run(main())
board.close()
