# The pairing code of a server that pairs devices (reference §6.3 `activation`): shown on the board's
# display when it has one, and spoken on its speaker, as the official firmware does with its digit
# sounds. net.activate calls on_code for every OTA reply that carries a code (about every 30 s while
# the owner has not approved it); the code is said again at most every 30 s. The sounds come from
# tools/firmware/digit_sounds.py (docs/firmware.md, "Pairing code"): frozen into the Wren build as the
# module wren_digits (Opus), else the file at the hal's sounds_path() (IMA ADPCM). Without them, or with
# a bad one, the code is logged and shown only: nothing here may stop pairing.
#
# Playing goes through the device's own speaker path: decoded PCM onto the Downlink's PCM ring, which
# audio_tasks.speaker_task plays in 20 ms chunks with the volume gain (this object stands in for the
# Device it reads). Buffers are made once, when the first code comes; no allocation per frame.
import asyncio
import struct
import time
from array import array

from micropython import const

from wren_device import dsp
from wren_device.audio_tasks import speaker_task
from wren_device.log import log

_ADPCM = const(1)
_OPUS = const(2)
_LEAD = const(10)  # clip 10: the words "pairing code"; 0..9 are the digits
_EVERY_MS = const(30000)
_GAP_MS = const(200)  # between digits
_PAUSE_MS = const(400)  # after the lead words and between the two groups of three
_IN = const(64)  # ADPCM bytes decoded at a time (8 ms at 16 kHz)
_MAX_PACKET = const(600)
_STEPS = array("H", (
    7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 19, 21, 23, 25, 28, 31, 34, 37, 41, 45, 50, 55, 60, 66, 73, 80, 88,
    97, 107, 118, 130, 143, 157, 173, 190, 209, 230, 253, 279, 307, 337, 371, 408, 449, 494, 544, 598,
    658, 724, 796, 876, 963, 1060, 1166, 1282, 1411, 1552, 1707, 1878, 2066, 2272, 2499, 2749, 3024,
    3327, 3660, 4026, 4428, 4871, 5358, 5894, 6484, 7132, 7845, 8630, 9493, 10442, 11487, 12635, 13899,
    15289, 16818, 18500, 20350, 22385, 24623, 27086, 29794, 32767))


class Sounds:
    # The asset (docs/firmware.md): b"WDG1", format, clip count, rate, then (offset, length) per clip.
    # `data` is the frozen bytes (read in place, from flash) or None with `f` an open file.
    def __init__(self, data, f):
        self.data = data
        self.f = f
        head = bytearray(8)
        self.read(0, head, 8)
        magic, self.format, count, self.rate = struct.unpack("<4sBBH", head)
        if magic != b"WDG1" or count <= _LEAD or self.format not in (_ADPCM, _OPUS):
            raise ValueError("not a Wren digit-sounds asset")
        table = bytearray(8 * count)
        self.read(8, table, len(table))
        self.clips = array("I", struct.unpack("<%dI" % (2 * count), table))  # offset, length, ...

    def read(self, pos, buf, n):
        if self.data is not None:
            if pos + n > len(self.data):
                n = max(0, len(self.data) - pos)
            dsp.copy_bytes(buf, 0, self.data, pos, n)
            return n
        self.f.seek(pos)
        return self.f.readinto(buf, n) or 0

    def close(self):
        if self.f is not None:
            self.f.close()


def open_sounds(path):
    try:
        import wren_digits  # the Wren build: frozen in flash (firmware/manifest.py)

        return Sounds(wren_digits.DATA, None)
    except ImportError:
        pass
    try:
        f = open(path, "rb")
    except OSError:
        log("pairing", "no digit sounds at %s: the code is shown and logged only" % path)
        return None
    try:
        return Sounds(None, f)
    except (ValueError, OSError) as e:
        f.close()
        log("pairing", "digit sounds %s unusable (%s): the code is shown and logged only" % (path, e))
        return None


class Pairing:
    def __init__(self, board, downlink, codec, volume, sounds_path, every_ms=_EVERY_MS):
        self.board = board
        self.downlink = downlink
        self.codec = codec
        self.volume = volume
        self.path = sounds_path
        self.every_ms = every_ms
        self.speaker = None  # what audio_tasks.speaker_task reads of a device
        self.playing = False
        self.heap_peak = 0
        self._task = None
        self._last = None
        self._buf = None
        self._sounds = self._steps = None
        self._step = self._pos = self._end = self._silent = self._frame = 0

    def on_code(self, code, message):
        # A plain function (net.activate does not wait for it): shows now, speaks in the background.
        try:
            self._show(code, message)
        except Exception as e:
            log("pairing", "display failed: %r" % e)
        now = time.ticks_ms()
        if self._task is not None or (self._last is not None and
                                      time.ticks_diff(now, self._last) < self.every_ms):
            return
        digits = [ord(c) - 48 for c in code if "0" <= c <= "9"]
        if digits:
            self._last = now
            self._task = asyncio.create_task(self._speak(digits))

    def _show(self, code, message):
        display = getattr(self.board, "display", None)
        if display is None:
            return
        lines = ["Pairing code " + (code[:3] + " " + code[3:] if len(code) == 6 else code)]
        lines += [ln for ln in (message or "").split("\n") if ln and ln != code]
        display.show(lines)

    async def stop(self):
        # Paired (or given up): a code still being said stops now; the speaker is left drained.
        task = self._task
        if task is not None:
            task.cancel()
            while not task.done():
                await asyncio.sleep_ms(10)
            self._task = None

    async def _speak(self, digits):
        sounds = spk = None
        dl = self.downlink
        try:
            sounds = open_sounds(self.path)
            if sounds is None:
                return
            if sounds.format == _OPUS and self.codec.format != "opus":
                log("pairing", "the digit sounds are Opus and this build has no opus module")
                return
            rate = dl.max_rate
            if sounds.format == _ADPCM and not 0 < sounds.rate <= rate:
                log("pairing", "the digit sounds' %d Hz do not fit the speaker's %d Hz" % (sounds.rate, rate))
                return
            if self._buf is None:  # once: an ADPCM block or Opus packet, the decoded block, the state
                out = 2 * _IN * 2 * (rate // sounds.rate + 1)
                self._buf = (bytearray(_MAX_PACKET), bytearray(out), bytearray(8),
                             array("H", (sounds.rate, rate)))
            # What to play: clip numbers, and silences as 0x80 | tens of ms.
            steps = bytearray([_LEAD, 0x80 | _PAUSE_MS // 10])
            for k in range(len(digits)):
                pause = _PAUSE_MS if k == len(digits) - 1 or (k == 2 and len(digits) == 6) else _GAP_MS
                steps += bytes((digits[k], 0x80 | pause // 10))
            dl.configure(rate, 60)
            dl.flush()
            dl.set_volume(self.volume)
            self._start(sounds, steps)
            self.speaker = self.board.speaker(rate)
            spk = asyncio.create_task(speaker_task(self))
            log("pairing", "saying the code")
            t0 = time.ticks_ms()
            while not self._pump():  # as much as the PCM ring takes, then let it play
                await asyncio.sleep_ms(10)
            while dl.pending() or self.playing:
                await asyncio.sleep_ms(20)
            log("pairing", "code spoken (%d ms)" % time.ticks_diff(time.ticks_ms(), t0))
        except Exception as e:  # a broken asset or speaker: logged, pairing goes on
            log("pairing", "cannot say the code: %r" % e)
        finally:
            if spk is not None:
                spk.cancel()
                dl.flush()
                self.playing = False
                self.board.speaker_drained()
            if sounds is not None:
                sounds.close()
            self._sounds = None
            self._task = None

    # The playing state, all of it set here: _pump runs per block and must allocate nothing (no
    # coroutine, no tuple, no new attribute; tests/firmware/test_pairing_code.py locks the heap).
    def _start(self, sounds, steps):
        self._sounds = sounds
        self._steps = steps
        self._step = 0
        self._pos = self._end = self._silent = 0
        self._frame = self.downlink.rate * 2 * 60 // 1000  # the asset's Opus frames are 60 ms

    def _pump(self):
        # Decodes blocks onto the PCM ring while it has room -> True once everything is queued.
        dl = self.downlink
        sounds = self._sounds
        src, out, st, rates = self._buf
        while True:
            if self._silent > 0:
                n = min(self._silent, len(out))
                if dl.room() < n:
                    return False
                dsp.fill_zero(out, 0, n)
                dl.pcm.write(out, 0, n)
                self._silent -= n
            elif self._pos < self._end:
                if sounds.format == _ADPCM:
                    if dl.room() < len(out):
                        return False
                    n = sounds.read(self._pos, src, min(_IN, self._end - self._pos))
                    self._pos = self._pos + n if n else self._end
                    dl.pcm.write(out, 0, 2 * dsp.adpcm_decode(src, n, out, st, _STEPS, rates))
                else:
                    if dl.room() < self._frame:
                        return False
                    sounds.read(self._pos, src, 2)
                    n = (src[0] << 8) | src[1]
                    if n > _MAX_PACKET:
                        raise ValueError("Opus packet of %d bytes" % n)
                    sounds.read(self._pos + 2, src, n)
                    self._pos += 2 + n
                    n = self.codec.decode(src, n)
                    dl.pcm.write(self.codec.out, 0, n)
            elif self._step < len(self._steps):
                code = self._steps[self._step]
                self._step += 1
                if code & 0x80:
                    self._silent = dl.rate * 2 * (code & 0x7F) // 100
                else:
                    self._pos = sounds.clips[2 * code]
                    self._end = self._pos + sounds.clips[2 * code + 1]
                    dsp.fill_zero(st, 0, 8)
            else:
                return True
