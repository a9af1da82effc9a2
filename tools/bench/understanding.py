"""Understanding bench: spoken requests → ASR engine → built-in agent; is the request understood?

    .venv/bin/python tools/bench/understanding.py                       # full set (77 requests), a few min
    .venv/bin/python tools/bench/understanding.py --quick               # 6 requests (the smoke run)
    .venv/bin/python tools/bench/understanding.py --engines pocketsphinx --json out.json

The set is tools/bench/data/requests.toml (text, category, expected tool calls or reply). Two voices speak
it: piper joe (tests/support/spoken.py, deterministic) and espeak-ng en-us; two conditions: clean, and pink
noise at 20 dB SNR (scaled to the utterance's speech RMS, seeded per voice and text). Per ASR engine
(`wren.speech.asr.load_asr(AsrConfig(engine=..., workers=0))`), each engine in its own process so its RSS
is its own, the audio goes through `open_stream()` / `accept()` in 60 ms chunks / `pause()` (if the stream
has it, the server's "speech stopped" hint) / `finish()` like the server feeds it. Measured: WER (all
requests, and open questions alone), understood % (understanding_check.py: the heard text through the real
built-in agent with a fake device), RTF (CPU of accept + finish / audio seconds), finalise latency (after
the last accept until finish() returns, pause() included) and RSS after loading the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import wave
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.bench.common import PYTHON, REPO, fmt, percentile, write_json
from tools.bench.understanding_check import (
    Request,
    UnderstandingChecker,
    load_requests,
    normalise,
    word_errors,
)

DEFAULT_ENGINES = ("moonshine", "pocketsphinx")
VOICES = ("piper", "espeak")
CONDITIONS = ("clean", "noisy")
SNR_DB = 20.0
RATE = 16000
CHUNK_BYTES = RATE * 60 // 1000 * 2  # 60 ms of int16, one device frame
LEAD_MS = TAIL_MS = 300
ESPEAK_CACHE = REPO / ".cache" / "spoken-espeak"
TARGETS = {"understood_clean_pct": 95.0, "understood_noisy_pct": 90.0, "wer_open_clean_pct": 8.0}


# ---- audio: voices and noise ---------------------------------------------------------------------------


def espeak_pcm(text: str) -> bytes:
    """16 kHz PCM of espeak-ng en-us saying `text`, padded like piper (cached in .cache/spoken-espeak)."""
    import numpy as np

    key = hashlib.sha1(f"{text}|{RATE}|{LEAD_MS}|{TAIL_MS}|espeak-ng-en-us".encode()).hexdigest()[:16]
    path = ESPEAK_CACHE / f"{key}.pcm"
    if path.exists():
        return path.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        wav_path = Path(tmp) / "out.wav"
        cmd = ["espeak-ng", "-v", "en-us", "-w", str(wav_path), text]
        subprocess.run(cmd, check=True, capture_output=True)
        with wave.open(str(wav_path)) as w:
            src_rate, audio = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    from tests.support.spoken import store_padded

    return store_padded(path, audio, src_rate, RATE, LEAD_MS, TAIL_MS)


def voice_pcm(voice: str, text: str) -> bytes:
    if voice == "piper":
        from tests.support.spoken import spoken_pcm

        return spoken_pcm(text, RATE, lead_ms=LEAD_MS, tail_ms=TAIL_MS)
    return espeak_pcm(text)


def voice_status(voice: str) -> str:
    if voice == "espeak" and shutil.which("espeak-ng") is None:
        return "unavailable: espeak-ng is not installed (make installs it: apt-get install espeak-ng)"
    return "available"


def speech_rms(audio: Any) -> float:
    """RMS over the 20 ms frames within 30 dB of the loudest one: the speech, not the pauses around it."""
    import numpy as np

    frame = RATE // 50
    frames = audio[: len(audio) // frame * frame].astype(np.float64).reshape(-1, frame)
    rms = np.sqrt((frames**2).mean(axis=1))
    voiced = rms[rms >= rms.max() / 10 ** (30 / 20)] if rms.size and rms.max() > 0 else rms
    return float(np.sqrt((voiced**2).mean())) if voiced.size else 0.0


def with_noise(pcm: bytes, snr_db: float, seed: int) -> bytes:
    """Pink noise (1/f power, like a room more than white hiss) at `snr_db` below the speech RMS."""
    import numpy as np

    audio = np.frombuffer(pcm, dtype="<i2")
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(len(audio)))
    freqs = np.fft.rfftfreq(len(audio))
    spectrum /= np.sqrt(np.maximum(freqs, freqs[1] if len(freqs) > 1 else 1.0))
    noise = np.fft.irfft(spectrum, n=len(audio))
    noise *= speech_rms(audio) / 10 ** (snr_db / 20) / max(float(np.sqrt((noise**2).mean())), 1e-9)
    return np.clip(audio + noise, -32768, 32767).astype("<i2").tobytes()


def condition_pcm(voice: str, condition: str, text: str) -> bytes:
    pcm = voice_pcm(voice, text)
    if condition == "clean":
        return pcm
    return with_noise(pcm, SNR_DB, seed=zlib.crc32(f"{voice}|{text}".encode()))


# ---- one engine, in its own process ----------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def device_phrase_set() -> tuple[tuple[str, ...], float]:
    """What the server biases a session's recogniser toward with this device (`[asr] bias = "auto"` and the
    built-in agent): the agent's phrases plus the xiaozhi device's tool words (wren.agent.vocabulary)."""
    from wren.agent.vocabulary import recognition_phrases
    from wren.speech.asr.bias import margin_for
    from wren.tools.spec import ToolSpec

    from tests.agent.fakes import XIAOZHI_TOOLS

    tools = [ToolSpec.from_mcp(spec, "device") for spec in XIAOZHI_TOOLS]
    return recognition_phrases(tools), margin_for("auto", "builtin")


def decode(engine: Any, pcm: bytes, speaker: str | None) -> dict[str, float | str]:
    """Feed one utterance as the server does (phrase-set bias included); the heard text and what it cost."""
    stream = engine.open_stream(speaker=speaker)
    prefer = getattr(stream, "bias", None)
    if callable(prefer):
        prefer(*device_phrase_set())
    try:
        cpu_started, wall_started = time.process_time(), time.perf_counter()
        for i in range(0, len(pcm), CHUNK_BYTES):
            stream.accept(pcm[i : i + CHUNK_BYTES])
        last_accept = time.perf_counter()
        pause = getattr(stream, "pause", None)
        if callable(pause):
            pause()
        heard = stream.finish()
        done = time.perf_counter()
        cpu = time.process_time() - cpu_started
    finally:
        stream.close()
    return {"heard": heard, "audio_s": len(pcm) / 2 / RATE, "cpu_s": cpu, "wall_s": done - wall_started,
            "finalise_s": done - last_accept}


def summarise_cell(
    voice: str, condition: str, requests: list[Request], decoded: list[dict], verdicts: list[Any]
) -> dict:
    errors = words = open_errors = open_words = 0
    understood = judged = 0
    by_category: dict[str, list[int]] = {}
    utterances = []
    for request, result, verdict in zip(requests, decoded, verdicts, strict=True):
        ref, hyp = normalise(request.text), normalise(str(result["heard"]))
        err = word_errors(ref, hyp)
        errors, words = errors + err, words + len(ref)
        if not request.judged:
            open_errors, open_words = open_errors + err, open_words + len(ref)
        else:
            judged += 1
            understood += verdict.understood
            tally = by_category.setdefault(request.category, [0, 0])
            tally[0] += verdict.understood
            tally[1] += 1
        utterances.append(
            {
                "text": request.text,
                "heard": result["heard"],
                "understood": verdict.understood if request.judged else None,
                "reason": verdict.reason,
            }
        )
    audio_s = sum(float(r["audio_s"]) for r in decoded)
    finalise = [1000 * float(r["finalise_s"]) for r in decoded]
    return {
        "voice": voice,
        "condition": condition,
        "utterances": len(requests),
        "audio_s": round(audio_s, 1),
        "wer_pct": round(100 * errors / words, 1) if words else None,
        "wer_open_pct": round(100 * open_errors / open_words, 1) if open_words else None,
        "understood": understood,
        "judged": judged,
        "understood_pct": round(100 * understood / judged, 1) if judged else None,
        "rtf": round(sum(float(r["cpu_s"]) for r in decoded) / audio_s, 3),
        "rtf_wall": round(sum(float(r["wall_s"]) for r in decoded) / audio_s, 3),
        "finalise_ms": {"p50": _r(percentile(finalise, 50)), "p95": _r(percentile(finalise, 95))},
        "by_category": by_category,
        "detail": utterances,
    }


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def run_engine(name: str, quick: bool, voices: list[str]) -> dict:
    """Load one engine here, decode every voice × condition, judge what was heard."""
    import psutil
    from wren.config import AsrConfig
    from wren.speech.asr import AsrError, close_asr, load_asr

    process = psutil.Process()
    baseline_mb = process.memory_info().rss / 2**20
    started = time.perf_counter()
    try:
        engine = load_asr(AsrConfig(engine=name, workers=0, pool_size=1))
    except (AsrError, ImportError, OSError) as exc:
        return {"status": "unavailable", "reason": f"{type(exc).__name__}: {exc}"}
    load_s = time.perf_counter() - started
    rss_mb = process.memory_info().rss / 2**20
    requests = chosen_requests(quick)
    decode(engine, condition_pcm("piper", "clean", requests[0].text), None)  # a server's pool is warm too
    # Each voice × condition is one device (`speaker`, as the server passes the device id): pocketsphinx
    # starts each utterance from the channel adaptation that device's previous one ended with.
    decoded = {
        (voice, condition): [
            decode(engine, condition_pcm(voice, condition, r.text), f"{voice}/{condition}") for r in requests
        ]
        for voice in voices
        for condition in CONDITIONS
    }
    rss_after_mb = process.memory_info().rss / 2**20
    close_asr(engine)  # decode threads or worker processes, if the engine has any

    async def judge_all() -> dict[tuple[str, str], list[Any]]:
        async with UnderstandingChecker() as checker:
            return {
                cell: [await checker.judge(r, str(d["heard"])) for r, d in zip(requests, out, strict=True)]
                for cell, out in decoded.items()
            }

    verdicts = asyncio.run(judge_all())
    return {
        "status": "measured",
        "load_s": round(load_s, 2),
        "rss_baseline_mb": round(baseline_mb, 1),
        "rss_mb": round(rss_mb, 1),
        "rss_after_run_mb": round(rss_after_mb, 1),
        "cells": [summarise_cell(v, c, requests, decoded[(v, c)], verdicts[(v, c)]) for v, c in decoded],
    }


def _engine_in_subprocess(name: str, quick: bool, voices: list[str]) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    try:
        cmd = [PYTHON, __file__, "--engine-worker", name, "--voices", *voices, "--json", str(out)]
        proc = subprocess.run([*cmd, *(["--quick"] if quick else [])], capture_output=True, text=True,
                              timeout=3600)
        if proc.returncode != 0 or not out.stat().st_size:
            return {"status": "error", "reason": f"exit {proc.returncode}: {proc.stderr[-800:]}"}
        return dict(json.loads(out.read_text()))
    finally:
        out.unlink(missing_ok=True)


# ---- the whole bench -------------------------------------------------------------------------------------


def reference(requests: list[Request]) -> dict:
    """The typed text itself through the checker: what the agent understands with a perfect recogniser."""

    async def judge_all() -> list[Any]:
        async with UnderstandingChecker() as checker:
            return [await checker.judge(r, r.text) for r in requests if r.judged]

    verdicts = asyncio.run(judge_all())
    judged = [r for r in requests if r.judged]
    misses = [{"text": r.text, "reason": v.reason} for r, v in zip(judged, verdicts, strict=True)
              if not v.understood]
    ok = len(judged) - len(misses)
    return {"understood": ok, "judged": len(judged), "understood_pct": round(100 * ok / len(judged), 1),
            "misses": misses}


def chosen_requests(quick: bool) -> list[Request]:
    """requests.toml, or the `--requests` set (in WREN_BENCH_REQUESTS, for the engine workers too)."""
    path = os.environ.get("WREN_BENCH_REQUESTS")
    return load_requests(quick, Path(path)) if path else load_requests(quick)


def run(quick: bool, engines: tuple[str, ...] | list[str] = DEFAULT_ENGINES) -> dict:
    from wren.config import AsrConfig

    requests = chosen_requests(quick)
    voices = {v: voice_status(v) for v in VOICES}
    available = [v for v, status in voices.items() if status == "available"]
    for voice in available:  # synthesise (or find cached) every utterance once, before any engine runs
        for r in requests:
            voice_pcm(voice, r.text)
    return {
        "quick": quick,
        "requests": len(requests),
        "judged": sum(r.judged for r in requests),
        "open": sum(not r.judged for r in requests),
        "voices": voices,
        "conditions": {"clean": "as spoken", "noisy": f"pink noise at {SNR_DB:g} dB SNR"},
        "default_engine": AsrConfig().engine,
        "targets": TARGETS,
        "reference": reference(requests),
        "engines": {name: _engine_in_subprocess(name, quick, available) for name in engines},
    }


# ---- tables ----------------------------------------------------------------------------------------------


def _cells(res: dict) -> list[tuple[str, dict, dict]]:
    engines = (res.get("engines") or {}).items()
    return [(name, eng, cell) for name, eng in engines for cell in eng.get("cells", [])]


def _targets(res: dict, engine: str, condition: str) -> tuple[float | None, float | None]:
    """(understood ≥, open-sentence WER ≤) targets for this row; only the default engine has them."""
    if engine != res.get("default_engine"):
        return None, None
    if condition == "clean":
        return TARGETS["understood_clean_pct"], TARGETS["wer_open_clean_pct"]
    return TARGETS["understood_noisy_pct"], None


def table_rows(res: dict) -> list[dict]:
    """Rows for run_all's one table (metric, value, unit, target, status)."""

    def row(metric: str, value: Any, unit: str, target: float | None, at_least: bool) -> dict:
        status = ""
        if target is not None:
            ok = isinstance(value, int | float) and (value >= target if at_least else value <= target)
            status = "met" if ok else "MISSED"
        target_text = "" if target is None else f"{'≥' if at_least else '≤'} {target:g}{unit}"
        return {"metric": metric, "value": value, "unit": unit, "target": target_text, "status": status}

    if not res:
        return []
    if "error" in res:  # the phase itself failed (run_all caught it)
        failed = {"metric": "understanding", "value": "error", "unit": "", "target": ""}
        return [{**failed, "status": str(res["error"])[:90]}]
    rows = []
    ref = res.get("reference") or {}
    typed = ref.get("understood_pct")
    rows.append(row("understanding: typed text (no ASR): understood", typed, " %", None, True))
    for name, eng in (res.get("engines") or {}).items():
        if eng.get("status") != "measured":
            rows.append({"metric": f"understanding: {name}", "value": eng.get("status", "error"), "unit": "",
                         "target": "", "status": str(eng.get("reason", ""))[:90]})
    for name, _engine, cell in _cells(res):
        label = f"understanding: {name}, {cell['voice']}, {cell['condition']}"
        understood_target, wer_target = _targets(res, name, cell["condition"])
        rows.append(row(f"{label}: understood", cell["understood_pct"], " %", understood_target, True))
        rows.append(row(f"{label}: WER open sentences", cell["wer_open_pct"], " %", wer_target, False))
    return rows


HEADER = ("engine", "voice", "condition", "WER all", "WER open", "understood", "RTF", "fin p50/p95 ms",
          "RSS MB")


def wide_rows(res: dict) -> list[tuple[str, ...]]:
    rows = []
    for name, eng, cell in _cells(res):
        understood_target, wer_target = _targets(res, name, cell["condition"])
        understood = f"{fmt(cell['understood_pct'], ' %')} ({cell['understood']}/{cell['judged']})"
        wer_open = fmt(cell["wer_open_pct"], " %")
        fin = cell["finalise_ms"]
        rows.append((
            name, cell["voice"], cell["condition"], fmt(cell["wer_pct"], " %"),
            wer_open + (f" (≤ {wer_target:g})" if wer_target is not None else ""),
            understood + (f" (≥ {understood_target:g})" if understood_target is not None else ""),
            f"{cell['rtf']:.3f}", f"{fmt(fin['p50'])} / {fmt(fin['p95'])}", fmt(eng["rss_mb"]),
        ))
    return rows


def _others(res: dict) -> list[str]:
    ref = res.get("reference") or {}
    lines = [f"typed text through the agent (no ASR): {ref.get('understood')}/{ref.get('judged')} understood"]
    lines += [f"{name}: {eng.get('status')} ({eng.get('reason', '')[:200]})"
              for name, eng in (res.get("engines") or {}).items() if eng.get("status") != "measured"]
    lines += [f"voice {v}: {s}" for v, s in (res.get("voices") or {}).items() if s != "available"]
    return lines


def print_table(res: dict) -> None:
    rows = [HEADER, *wide_rows(res)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    counts = f"{res.get('requests')} requests: {res.get('judged')} judged, {res.get('open')} open"
    print(f"\nUnderstanding ({counts}; noisy = {res.get('conditions', {}).get('noisy')}; targets for the "
          f"default engine, {res.get('default_engine')})")
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)))
    for line in _others(res):
        print(line)


def markdown_table(res: dict) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|---|---|---|" + "---:|" * (len(HEADER) - 3)]
    lines += ["| " + " | ".join(r) + " |" for r in wide_rows(res)]
    return "\n".join([*lines, "", *[f"- {line}" for line in _others(res)]]) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small smoke set (requests marked quick)")
    parser.add_argument("--engines", nargs="+", default=list(DEFAULT_ENGINES), help="ASR engines to measure")
    parser.add_argument("--json", help="write every number (and every heard text) here")
    parser.add_argument("--markdown", help="also write the table as Markdown here")
    parser.add_argument("--requests", help="another set, e.g. tools/bench/data/requests_heldout.toml")
    parser.add_argument("--engine-worker", help=argparse.SUPPRESS)  # internal: one engine, in this process
    parser.add_argument("--voices", nargs="+", default=list(VOICES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.requests:
        os.environ["WREN_BENCH_REQUESTS"] = str(Path(args.requests).resolve())
    if args.engine_worker:
        try:
            write_json(args.json, run_engine(args.engine_worker, args.quick, args.voices))
        except Exception:
            traceback.print_exc()
            return 1
        return 0
    if args.json:  # checked before the run: a few minutes of measuring must not be lost to a missing folder
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    res = run(args.quick, args.engines)
    write_json(args.json, res)
    print_table(res)
    if args.markdown:
        Path(args.markdown).write_text(markdown_table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
