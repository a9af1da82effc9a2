"""Speech engines are loaded once per test session (they are the slow part), like in the server."""

from __future__ import annotations

import numpy as np
import pytest
from wren.config import AsrConfig, TtsConfig, VadConfig
from wren.speech.asr import load_asr
from wren.speech.tts import load_tts
from wren.speech.vad import load_vad

from tests.support.spoken import spoken_pcm

CHUNK_60MS_16K = 16000 * 60 // 1000 * 2  # bytes of 16 kHz int16 PCM in one 60 ms device frame


@pytest.fixture(scope="session")
def pocketsphinx_engine():
    return load_asr(AsrConfig(engine="pocketsphinx", pool_size=2))


@pytest.fixture(scope="session")
def piper_engine():
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


def spoken(text: str, sample_rate: int = 16000) -> bytes:
    return spoken_pcm(text, sample_rate=sample_rate)
