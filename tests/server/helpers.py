"""Shared steps for the server tests: speak an utterance as a device would, recognise reply audio."""

from __future__ import annotations

import asyncio
import re
import time
from functools import lru_cache
from typing import Any

import numpy as np
import soxr

from tests.support.device import TestDevice
from tests.support.received import Reply
from tests.support.spoken import spoken_pcm

# Enough trailing silence for auto mode's VAD end (vad.silence_ms = 500 by default) plus margin.
AUTO_TAIL_MS = 1200


@lru_cache(maxsize=1)
def _recogniser():
    from wren.config import AsrConfig
    from wren.speech.asr import load_asr

    return load_asr(AsrConfig(pool_size=1))


def recognise(pcm: bytes, rate: int) -> str:
    """pocketsphinx's words for int16 mono PCM at `rate` (the reply audio, decoded by the device)."""
    samples = np.frombuffer(pcm, dtype="<i2")
    if rate != 16000:
        samples = soxr.resample(samples, rate, 16000).astype("<i2")
    stream = _recogniser().open_stream()
    try:
        stream.accept(samples.tobytes())
        return stream.finish()
    finally:
        stream.close()


async def speak(dev: TestDevice, text: str, mode: str, *, start: bool = True) -> None:
    """One utterance: `listen start`, the piper-spoken words in real-time 60 ms frames, then the end of
    the turn as the device marks it (manual: `listen stop`; auto/realtime: the mic keeps sending
    silence, and the server's VAD ends the utterance)."""
    if start:
        await dev.listen_start(mode)
    await dev.stream_pcm(spoken_pcm(text, dev.sample_rate))
    if mode == "manual":
        await dev.listen_stop()
    else:
        await dev.stream_silence(AUTO_TAIL_MS)


def words(text: str) -> set[str]:
    return set(plain(text).split())


CLOCK_WORDS = frozenset({
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "thirty",
    "forty", "fifty", "ninety", "o'clock", "oh",
})


def heard_a_time(heard: set[str]) -> bool:
    """Words recognised from "It's 6:14 PM." as spoken: "it's", or the half of the day when the recogniser
    turns "It's six" into "At six" (it does for a few minutes of the clock, 4 of 120 measured), or "at"
    with numbers (at 06:2x UTC on 2026-12-06 the device's reply was heard as "at nine ninety six")."""
    return ("it's" in heard or bool({"am", "pm"} & heard) or {"a", "m"} <= heard or {"p", "m"} <= heard
            or ("at" in heard and bool(CLOCK_WORDS & heard)))


def plain(text: str) -> str:
    """Lower-case words without punctuation: Moonshine writes "What time is it?", a test says
    "what time is it"."""
    return " ".join(re.sub(r"[^\w' ]+", " ", text.lower()).split())


def assert_complete_reply(dev: TestDevice, reply: Reply, *, timing: bool = True) -> None:
    """The framing every reply must have: sentence_start before audio, decodable audio, stop after it.

    `timing=False` skips the arrival-time check, for tests whose client loop is itself busy (load),
    where frames can sit in the client's socket buffer and be read in a burst."""
    assert reply.sentences, f"no sentence_start in {dev.summary()}"
    assert reply.frames, "no reply audio"
    first_sentence_at = next(i for i, e in enumerate(reply.events) if e.msg and e.msg.get("state") ==
                             "sentence_start")
    first_audio_at = next(i for i, e in enumerate(reply.events) if e.kind == "audio")
    assert first_sentence_at < first_audio_at, "sentence_start must precede its audio"
    assert reply.events[-1].msg == {"type": "tts", "state": "stop", "session_id": dev.session_id}
    pcm, rate = dev.decode_reply(reply)
    assert len(pcm) == len(reply.frames) * rate * 60 // 1000 * 2
    assert np.abs(np.frombuffer(pcm, dtype="<i2")).max() > 1000, "reply audio is silent"
    # `tts stop` only after the device has played the last frame (paced audio + drain margin); the
    # pre-buffer lets the first frames arrive up to ~0.4 s early.
    if not timing:
        return
    played_until = reply.frames[0].t + reply.audio_s
    assert reply.stop_t >= played_until - 0.5, (reply.stop_t - reply.frames[0].t, reply.audio_s)


def session_of(server: Any, dev: TestDevice) -> Any:
    """The server's session of this test device."""
    return next(s for s in list(server.sessions) if s.identity.device_id == dev.device_id)


async def until(predicate: Any, timeout: float, what: str, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(poll_s)
