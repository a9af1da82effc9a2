# The two audio tasks of wren_device.device.Device. Their steady state allocates nothing (proven inside a
# running loop under heap_lock by tests/firmware/test_heap_lock.py): asyncio's stream waits allocate (a
# generator per call, an IO-queue entry per wait), so each task owns a select.poll of its stream, asks
# it without waiting (ipoll(0) reuses its result tuple) and sleeps briefly with asyncio.sleep_ms, the one
# await that allocates nothing. A short read or write continues at an offset: readinto through a scratch
# buffer and a viper copy, write(buf, off, n); never a view.
import asyncio
import gc
import select

from micropython import const

from wren_device import dsp
from wren_device.ws import WsClosed

_MIC_POLL_MS = const(20)  # a 60 ms frame is read in a few pieces; the I2S DMA holds far more
_SPK_POLL_MS = const(10)  # a 20 ms chunk waits at most this long for room in the speaker buffer
_DRAIN_STEP_MS = const(20)
_IDLE_POLL_MS = const(20)


def _ready(poller):
    for _ in poller.ipoll(0):
        return True
    return False


def _sample_heap(dev):
    used = gc.mem_alloc()  # the high-water mark the sim reports (garbage not yet collected included)
    if used > dev.heap_peak:
        dev.heap_peak = used


async def mic_task(dev):
    # The mic is read all the time (the I2S DMA must not overflow); frames go out only while listening.
    mic = dev.board.mic
    up = dev.uplink
    raw = up.raw
    size = len(raw)
    tmp = bytearray(256)
    poller = select.poll()
    poller.register(mic, select.POLLIN)  # polling also puts an ESP32 I2S into non-blocking mode
    got = 0
    while True:
        if not _ready(poller):
            await asyncio.sleep_ms(_MIC_POLL_MS)
            continue
        if got == 0:
            k = mic.readinto(raw, size) or 0
        else:
            want = size - got
            k = mic.readinto(tmp, want if want < 256 else 256) or 0
            dsp.copy_bytes(raw, got, tmp, 0, k)
        got += k
        if got < size:  # the rest of the frame is still being sampled: let it come
            await asyncio.sleep_ms(_MIC_POLL_MS)
            continue
        got = 0
        _sample_heap(dev)
        if dev.mic_open and dev.channel.ready:
            n = up.process_mic()
            try:
                await dev.channel.ws.send_binary(up.send, n)  # no coroutine when the socket takes it
            except WsClosed:
                pass  # the channel's reader sees the close and handles it
        else:
            await asyncio.sleep_ms(0)


async def speaker_task(dev):
    # Jitter ring -> fixed 20 ms chunks -> the board's speaker stream (dev.speaker, set by the hello).
    dl = dev.downlink
    board = dev.board
    spk = poller = None
    off = left = 0
    while True:
        if not left:
            if not dl.pending() or dev.speaker is None:
                if dev.playing:
                    waited = 0  # the speaker buffer plays out; audio arriving meanwhile goes on at once
                    while waited < board.speaker_buffer_ms and not dl.pending():
                        await asyncio.sleep_ms(_DRAIN_STEP_MS)
                        waited += _DRAIN_STEP_MS
                    if dl.pending():
                        continue
                    dev.playing = False
                    board.speaker_drained()
                else:
                    await asyncio.sleep_ms(_IDLE_POLL_MS)  # between replies (an Event.wait would allocate)
                continue
            dev.playing = True
            dl.next_chunk()
            off = 0
            left = len(dl.chunk)
        if spk is not dev.speaker:
            spk = dev.speaker
            poller = select.poll()  # a new speaker stream (a rate change): made once per change
            poller.register(spk, select.POLLOUT)
        if not _ready(poller):
            await asyncio.sleep_ms(_SPK_POLL_MS)
            continue
        k = spk.write(dl.chunk, off, left) or 0
        off += k
        left -= k
        if not left:
            _sample_heap(dev)
            await asyncio.sleep_ms(0)  # let the other tasks run between chunks
