"""Speech engines are loaded once per test session (they are the slow part), like in the server.

Spoken test input: `spoken` is tests/support/spoken.py's `spoken_pcm`, piper speech synthesised
*deterministically* (piper's sampling noise off). piper's default output varies from run to run, and
pocketsphinx hears "what can you do" as "what you need it" in roughly one synthesis of fifteen; with a fresh
cache on CI that would make word assertions fail at random. The deterministic voice decodes as well as the
natural one (10.9 % vs 9.6 % word errors on 30 sentences).
"""

from __future__ import annotations

import numpy as np
import pytest
from wren.config import AsrConfig, TtsConfig, VadConfig
from wren.speech.asr import load_asr
from wren.speech.tts import load_tts
from wren.speech.vad import load_vad

from tests.support.spoken import deterministic_voice, spoken_pcm  # noqa: F401 (imported from here too)

spoken = spoken_pcm  # the speech tests' name for it

CHUNK_60MS_16K = 16000 * 60 // 1000 * 2  # bytes of 16 kHz int16 PCM in one 60 ms device frame


@pytest.fixture(scope="session")
def pocketsphinx_engine():
    return load_asr(AsrConfig(engine="pocketsphinx", pool_size=2, workers=0))  # in-process: tests see inside


@pytest.fixture(scope="session")
def piper_engine():
    """The engine as the server loads it (natural, varying output)."""
    return load_tts(TtsConfig())


@pytest.fixture(scope="session")
def silero_vad():
    return load_vad(VadConfig(engine="silero"))


@pytest.fixture(scope="session")
def webrtc_vad():
    return load_vad(VadConfig(engine="webrtc"))


def feed_in_chunks(stream, pcm: bytes, chunk_bytes: int = CHUNK_60MS_16K) -> None:
    for i in range(0, len(pcm), chunk_bytes):
        stream.accept(pcm[i : i + chunk_bytes])


def recognise(engine, pcm: bytes) -> str:
    stream = engine.open_stream()
    try:
        feed_in_chunks(stream, pcm)
        return stream.finish()
    finally:
        stream.close()


def scaled(pcm: bytes, gain: float) -> bytes:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) * gain
    return np.clip(samples, -32768, 32767).astype("<i2").tobytes()
