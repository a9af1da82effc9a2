"""The component benchmark runs end to end and measures every number (their size is not asserted: speed
belongs to the benchmark, not to tests)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {
    "asr_rtf",
    "asr_finish_latency_mean_ms",
    "asr_finish_latency_max_ms",
    "asr_word_accuracy_pct",
    "tts_short_first_audio_ms",
    "tts_short_rtf",
    "tts_long_first_audio_ms",
    "tts_long_rtf",
    "vad_silero_ms_per_60ms_frame",
    "vad_webrtc_ms_per_60ms_frame",
    "opus_encode_16k_ms_per_60ms_frame",
    "opus_decode_16k_ms_per_60ms_frame",
    "opus_encode_24k_ms_per_60ms_frame",
    "opus_decode_24k_ms_per_60ms_frame",
}


def test_quick_benchmark_measures_every_component(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "bench" / "speech_components.py"),
            "--quick",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["quick"] is True
    results = report["results"]
    assert set(results) >= EXPECTED, EXPECTED - set(results)
    for name, value in results.items():
        assert isinstance(value, float | int) and math.isfinite(value) and value > 0, (name, value)
    assert "asr_rtf" in proc.stdout  # the table is printed too
