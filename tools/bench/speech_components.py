#!/usr/bin/env python3
"""Measure what each speech component costs on this machine (one thread, warm engines).

    .venv/bin/python tools/bench/speech_components.py            # full run, prints a table
    .venv/bin/python tools/bench/speech_components.py --quick    # smoke run (a few seconds of work)
    .venv/bin/python tools/bench/speech_components.py --json out.json

Measured:
- ASR (pocketsphinx, streaming): audio fed in 60 ms chunks as a device sends it; RTF = CPU time of all
  accept() + finish() calls / audio duration; finish latency = time of finish() after the last chunk
  (what the user waits for once they stop speaking); word accuracy (100 % - word error rate) against
  the spoken text.
- ASR (vosk, with --vosk-model DIR): the same cost measures for any vosk model folder.
- TTS (piper): time to first audio chunk and RTF for a short clause and a long sentence.
- VAD: cost per 60 ms frame of 16 kHz speech (Silero, webrtc).
- Opus: encode / decode cost per 60 ms mono frame at 16 and 24 kHz (the encoder settings Wren uses).
Test speech is piper-spoken (tests/support/spoken.py, cached), because pocketsphinx does not recognise espeak.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "server"))

from wren.config import AsrConfig, TtsConfig, VadConfig  # noqa: E402
from wren.speech.asr import load_asr  # noqa: E402
from wren.speech.codec import OpusDecoder, OpusEncoder  # noqa: E402
from wren.speech.tts import load_tts  # noqa: E402
from wren.speech.vad import load_vad  # noqa: E402

from tests.support.spoken import spoken_pcm  # noqa: E402

ASR_SENTENCES = [
    "what time is it",
    "set the volume to thirty",
    "what can you do",
    "turn on the kitchen light",
    "what is the weather like today",
    "set a timer for ten minutes",
    "play some music in the living room",
    "how far away is the moon",
    "remind me to call my mother tomorrow",
    "turn off all the lights please",
]
TTS_SHORT = "Sure, I can help."
TTS_LONG = (
    "The weather today will be mostly sunny with a light breeze from the west, "
    "and temperatures will reach about twenty degrees in the afternoon."
)
FRAME_MS = 60


def word_errors(reference: str, hypothesis: str) -> int:
    from tools.bench.understanding_check import word_errors as errors_in_words

    return errors_in_words(reference.split(), hypothesis.split())


def bench_asr(sentences: list[str], config: AsrConfig | None = None, prefix: str = "asr") -> dict[str, float]:
    """Recognition cost; `prefix` names the results (asr_ for pocketsphinx, asr_moonshine_, asr_vosk_ ...).
    Audio is fed as fast as possible, so moonshine's finish() is a full decode (no speculation): the worst
    case of its end-of-utterance latency."""
    started = time.perf_counter()
    # workers=0: the engine itself, in this process. Through worker processes `process_time()` would only
    # count this process's pipe writes (RTF ≈ 0.0), not the recognition.
    engine = load_asr(config or AsrConfig(engine="pocketsphinx", pool_size=1, workers=0))
    load_s = time.perf_counter() - started
    chunk = 16000 * FRAME_MS // 1000 * 2
    audio_s = cpu_s = 0.0
    finish_latencies: list[float] = []
    errors = words = 0
    for sentence in sentences:
        pcm = spoken_pcm(sentence)
        stream = engine.open_stream()
        cpu_started = time.process_time()
        for i in range(0, len(pcm), chunk):
            stream.accept(pcm[i : i + chunk])
        finish_started = time.perf_counter()
        text = stream.finish()
        finish_latencies.append(time.perf_counter() - finish_started)
        cpu_s += time.process_time() - cpu_started
        stream.close()
        audio_s += len(pcm) / 2 / 16000
        errors += word_errors(sentence, text)
        words += len(sentence.split())
    results = {
        f"{prefix}_load_s": load_s,
        f"{prefix}_rtf": cpu_s / audio_s,
        f"{prefix}_finish_latency_mean_ms": statistics.mean(finish_latencies) * 1000,
        f"{prefix}_finish_latency_max_ms": max(finish_latencies) * 1000,
    }
    if prefix == "asr":
        # Word accuracy (100 - WER), so that a perfect run is a positive number like every other measure.
        # (Not reported for vosk: its model may not even be English.)
        results["asr_word_accuracy_pct"] = 100 * (1 - errors / words)
    return results


def bench_tts(repeats: int) -> dict[str, float]:
    started = time.perf_counter()
    engine = load_tts(TtsConfig(phrase_cache_kb=0))  # synthesis itself, not the phrase cache's hits
    load_s = time.perf_counter() - started
    list(engine.synthesize("Warm up."))  # first onnx run allocates; not what a session sees
    out: dict[str, float] = {"tts_load_s": load_s}
    for label, text in (("short", TTS_SHORT), ("long", TTS_LONG)):
        first_audio: list[float] = []
        rtf: list[float] = []
        for _ in range(repeats):
            started = time.perf_counter()
            first = None
            samples = 0
            for pcm in engine.synthesize(text):
                if first is None:
                    first = time.perf_counter() - started
                samples += len(pcm) // 2
            total = time.perf_counter() - started
            first_audio.append(first or total)
            rtf.append(total / (samples / engine.sample_rate))
        out[f"tts_{label}_first_audio_ms"] = statistics.median(first_audio) * 1000
        out[f"tts_{label}_rtf"] = statistics.median(rtf)
    return out


def _per_call_ms(fn: Callable[[Any], object], items: list[Any], calls: int) -> float:
    """Mean wall time of fn(item) over `calls` calls, cycling through `items`."""
    started = time.perf_counter()
    for i in range(calls):
        fn(items[i % len(items)])
    return (time.perf_counter() - started) / calls * 1000


def bench_vad(frames: int) -> dict[str, float]:
    pcm = spoken_pcm(ASR_SENTENCES[4])
    frame_bytes = 16000 * FRAME_MS // 1000 * 2
    chunks = [pcm[i : i + frame_bytes] for i in range(0, len(pcm) - frame_bytes, frame_bytes)]
    out = {}
    for engine in ("silero", "webrtc"):
        stream = load_vad(VadConfig(engine=engine)).new_stream()
        for chunk in chunks[:5]:
            stream.process(chunk)  # warm-up
        out[f"vad_{engine}_ms_per_60ms_frame"] = _per_call_ms(stream.process, chunks, frames)
        stream.close()
    return out


def bench_opus(frames: int) -> dict[str, float]:
    out = {}
    for rate in (16000, 24000):
        pcm = spoken_pcm(TTS_LONG, sample_rate=rate)
        encoder = OpusEncoder(rate, FRAME_MS, 24000)
        size = encoder.frame_bytes
        frame_list = [pcm[i : i + size].ljust(size, b"\0") for i in range(0, len(pcm), size)]
        packets = [encoder.encode(frame) for frame in frame_list]
        decoder = OpusDecoder(rate, 1, FRAME_MS)
        encoder = OpusEncoder(rate, FRAME_MS, 24000)
        out[f"opus_encode_{rate // 1000}k_ms_per_60ms_frame"] = _per_call_ms(
            encoder.encode, frame_list, frames
        )
        out[f"opus_decode_{rate // 1000}k_ms_per_60ms_frame"] = _per_call_ms(decoder.decode, packets, frames)
        out[f"opus_encoder_create_{rate // 1000}k_ms"] = _per_call_ms(
            lambda r: OpusEncoder(r, FRAME_MS, 24000), [rate], min(frames, 200)
        )
    return out


def run(quick: bool, vosk_model: str | None = None) -> dict[str, float]:
    results: dict[str, float] = {}
    sentences = ASR_SENTENCES[:2] if quick else ASR_SENTENCES
    results.update(bench_opus(frames=50 if quick else 2000))
    results.update(bench_vad(frames=20 if quick else 500))
    results.update(bench_asr(sentences))  # pocketsphinx (the "asr_" rows, comparable with earlier runs)
    moonshine = AsrConfig(engine="moonshine")
    results.update(bench_asr(sentences, moonshine, prefix="asr_moonshine"))
    if vosk_model:
        vosk_config = AsrConfig(engine="vosk", model_path=vosk_model, pool_size=1, workers=0)
        results.update(bench_asr(sentences, vosk_config, prefix="asr_vosk"))
    results.update(bench_tts(repeats=1 if quick else 3))
    return results


UNITS = {"_ms": "ms", "_s": "s", "_rtf": "× real time", "_pct": "%"}


def _unit(name: str) -> str:
    for suffix, unit in UNITS.items():
        if name.endswith(suffix) or f"{suffix}_" in name:
            return unit
    return ""


def print_table(results: dict[str, float]) -> None:
    width = max(len(k) for k in results)
    print(f"{'measure'.ljust(width)}  {'value':>10}  unit")
    print(f"{'-' * width}  {'-' * 10}  ----")
    for name, value in results.items():
        print(f"{name.ljust(width)}  {value:>10.4g}  {_unit(name)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--vosk-model", metavar="DIR", help="also measure vosk with this model folder")
    args = parser.parse_args(argv)
    results = run(args.quick, args.vosk_model)
    print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps({"quick": args.quick, "results": results}, indent=2))
    bad = [k for k, v in results.items() if not math.isfinite(v)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
