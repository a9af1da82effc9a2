"""Piper-spoken test utterances, cached on disk.

pocketsphinx does not recognise espeak speech, so every spoken test input is made by piper (the same
voice the server speaks with), through the product's own PiperEngine in deterministic mode: piper's
sampling noise is off, so the same sentence is the same audio on every machine and every run (with
noise on, "what can you do" was misheard in about one synthesis out of four after an Opus round trip,
which made word assertions flaky on a fresh clone). Synthesis is cached in .cache/spoken so a suite
run pays for each sentence once.
"""

from __future__ import annotations

import hashlib
import os
import threading
import wave
from functools import lru_cache
from pathlib import Path

import numpy as np
import soxr

CACHE_DIR = Path(__file__).resolve().parents[2] / ".cache" / "spoken"
_lock = threading.Lock()


@lru_cache(maxsize=1)
def deterministic_voice():
    """piper's joe voice with its sampling noise off: the same sentence is the same audio every time."""
    from wren.speech.tts.piper_engine import PiperEngine

    return PiperEngine(deterministic=True)


def spoken_pcm(text: str, sample_rate: int = 16000, lead_ms: int = 300, tail_ms: int = 300) -> bytes:
    """16-bit mono PCM of `text` spoken by piper at `sample_rate`, with silence around it."""
    key = hashlib.sha1(f"{text}|{sample_rate}|{lead_ms}|{tail_ms}|joe-medium-det".encode()).hexdigest()[:16]
    path = CACHE_DIR / f"{key}.pcm"
    if path.exists():
        return path.read_bytes()
    with _lock:
        engine = deterministic_voice()
        audio = np.frombuffer(b"".join(engine.synthesize(text)), dtype="<i2")
        src_rate = engine.sample_rate
    return store_padded(path, audio, src_rate, sample_rate, lead_ms, tail_ms)


def store_padded(
    path: Path, audio: np.ndarray, src_rate: int, sample_rate: int, lead_ms: int, tail_ms: int
) -> bytes:
    """`audio` resampled to `sample_rate`, with silence around it, written atomically to the cache `path`."""
    if src_rate != sample_rate:
        audio = soxr.resample(audio, src_rate, sample_rate).astype(np.int16)
    pad = lambda ms: np.zeros(sample_rate * ms // 1000, dtype=np.int16)  # noqa: E731
    pcm = np.concatenate([pad(lead_ms), audio, pad(tail_ms)]).astype("<i2").tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")  # suite workers share the cache
    tmp.write_bytes(pcm)
    tmp.replace(path)
    return pcm


def write_wav(path: Path, pcm: bytes, sample_rate: int) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm)
    return path


def spoken_wav(text: str, path: Path, sample_rate: int = 16000, **kw) -> Path:
    return write_wav(path, spoken_pcm(text, sample_rate, **kw), sample_rate)
