"""Speech engines, loaded once per process and shared by every device session.

`SpeechStack.load(config)` loads VAD, ASR and TTS (logging each load time). Codec, resampler and sentence
splitter are cheap per-stream objects: `wren.speech.codec`, `wren.speech.resample`, `wren.speech.sentences`.
All engine calls are blocking CPU work: run them in the server's executor. ASR runs in worker processes by
default (`asr.workers`); `SpeechStack.close()` stops them (they also never outlive this process). At most
`[limits] asr_streams` ASR streams are open at once (`wren.speech.asr.cap`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from wren.config import Config
from wren.speech.asr import AsrEngine, close_asr, load_asr
from wren.speech.tts import TtsEngine, load_tts
from wren.speech.vad import VadModel, load_vad

log = logging.getLogger(__name__)


@dataclass
class SpeechStack:
    vad: VadModel
    asr: AsrEngine
    tts: TtsEngine
    load_seconds: dict[str, float] = field(default_factory=dict)

    @classmethod
    def load(cls, config: Config) -> SpeechStack:
        timings: dict[str, float] = {}

        def timed(name: str, loader, section):  # type: ignore[no-untyped-def]
            started = time.perf_counter()
            engine = loader(section)
            timings[name] = time.perf_counter() - started
            log.info("speech: %s (%s) loaded in %.2f s", name, section.engine, timings[name])
            return engine

        vad = timed("vad", load_vad, config.vad)
        asr = timed("asr", lambda section: load_asr(section, config.limits.asr_streams), config.asr)
        tts = timed("tts", load_tts, config.tts)
        return cls(vad=vad, asr=asr, tts=tts, load_seconds=timings)

    def close(self) -> None:
        """Stop what runs outside this process (ASR worker processes). Idempotent."""
        close_asr(self.asr)


__all__ = ["SpeechStack"]
