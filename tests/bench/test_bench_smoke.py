"""The benchmarks keep working: `run_all.py --quick` (tiny N) against a real `wren serve` measures them all.

Asserts presence and finiteness only, never size: speed lives in `make bench`, not in tests.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "bench" / "run_all.py"), "--quick", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert out.exists(), proc.stdout[-3000:]
    return json.loads(out.read_text())


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def test_no_phase_failed(quick_results: dict) -> None:
    for phase in ("turn_latency", "memory", "concurrency", "overlap", "one_person", "speech_components",
                  "firmware", "understanding"):
        assert phase in quick_results
        assert "error" not in quick_results[phase], (phase, quick_results[phase])


def test_every_table_number_is_measured(quick_results: dict) -> None:
    rows = quick_results["table"]
    assert len(rows) > 30
    missing = [r["metric"] for r in rows
               if not (isinstance(r["value"], str) or _finite(r["value"]))
               and not r["status"].startswith("pending")]
    assert not missing, missing


def test_turn_latency_measured_every_turn_with_its_server_split(quick_results: dict) -> None:
    lat = quick_results["turn_latency"]
    for mode in ("manual", "auto"):
        assert lat[mode]["answered"] == lat[mode]["turns"] > 0
        for key in ("asr_finalise", "engine_first_sentence"):
            assert lat[mode]["split_ms"][key]["n"] == lat[mode]["answered"], (mode, key)
        # A held turn's first audio was "One moment." and the device stopped the reply there (turn_latency).
        for key in ("tts_first_audio", "encode", "send"):
            assert lat[mode]["split_ms"][key]["n"] == lat[mode]["answered"] - lat[mode]["held"], (mode, key)
    assert _finite(lat["auto"]["silence_window_ms"])
    assert all(s["answered"] == s["turns"] for s in lat["simultaneous"])


def test_concurrency_measured_uplink_lag_from_every_session(quick_results: dict) -> None:
    for row in quick_results["concurrency"]["rows"]:
        assert row["connected"] == row["n"]
        assert row["uplink_lag_ms"]["sessions"] == row["n"]
        assert row["uplink_lag_ms"]["frames"] > 0
        assert _finite(row["uplink_lag_ms"]["p99"])
        assert row["utterances"] == row["answered"] == row["n"]
        if sys.platform == "linux":  # the event loop thread's time on a core and waiting for one
            assert row["loop_on_core_pct"] > 0
            assert _finite(row["loop_waiting_for_core_pct"])


def test_memory_and_firmware_numbers(quick_results: dict) -> None:
    mem = quick_results["memory"]
    assert mem["rows"][0]["devices"] == 0
    assert _finite(mem["per_device_kb"])
    fw = quick_results["firmware"]
    if fw.get("status") == "pending":
        assert fw["reason"]
    else:
        assert fw["status"] == "measured", fw
        assert _finite(fw["min_heap_kb"]) and _finite(fw["frame_cost"]["uplink_us_per_frame"])
        # `make test` builds the Wren firmware (make firmware-host) first: its heap is measured too, the one
        # the 64 KB target is for.
        assert fw["opus"]["status"] == "measured", fw["opus"]
        assert _finite(fw["opus"]["min_heap_kb"])


def test_understanding_measured_every_voice_and_condition_with_pocketsphinx(quick_results: dict) -> None:
    und = quick_results["understanding"]
    assert und["reference"]["judged"] == und["judged"] > 0
    engine = und["engines"]["pocketsphinx"]
    assert engine["status"] == "measured", engine
    assert _finite(engine["rss_mb"]) and _finite(engine["load_s"])
    voices = [v for v, status in und["voices"].items() if status == "available"]
    assert "piper" in voices
    cells = {(c["voice"], c["condition"]): c for c in engine["cells"]}
    assert set(cells) == {(v, c) for v in voices for c in ("clean", "noisy")}
    for cell in cells.values():
        assert cell["utterances"] == und["requests"] and cell["judged"] == und["judged"]
        for key in ("wer_pct", "wer_open_pct", "understood_pct", "rtf", "audio_s"):
            assert _finite(cell[key]), (cell["voice"], cell["condition"], key)
        assert _finite(cell["finalise_ms"]["p50"]) and _finite(cell["finalise_ms"]["p95"])
        assert all(isinstance(u["heard"], str) for u in cell["detail"])
