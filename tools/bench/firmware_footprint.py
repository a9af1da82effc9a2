"""Firmware footprint: the smallest MicroPython heap with which a full simulated turn still passes, the heap
high-water mark, and the cost and allocations of the per-frame audio steps.

A full turn = the real firmware (firmware/main.py on the host hal, run by the firmware helper's
tools/sim/run.py, `make sim`) against a real `wren serve`: boot, connect, hello, device MCP, a manual-mode
press with a piper-spoken question on the simulated mic, release, `stt`, the spoken reply played to the
end, `turn: done`, exit 0. The heap is given as `-X heapsize=<n>wk`: n K *words*, which MicroPython
scales by the pointer width, so n is the heap in KB of a 32-bit board (the issue's convention). The
smallest passing n is found by bisection.

The high-water mark is the firmware's own report (gc.mem_alloc() sampled every audio frame, garbage
included, so it fills whatever heap it is given; the live peak after gc.collect() is the real need).
Those byte counts are host bytes (64-bit objects), roughly twice a 32-bit board's for object-heavy data.

Per-frame cost: tools/bench/mpy_audio_frame.py times the uplink (mic → int16 → PCM codec → framing →
WebSocket header + mask) and downlink (feed → volume → jitter ring → speaker chunks) steps with
time.ticks_us on this host, and counts heap bytes allocated per frame with gc disabled.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.bench.common import PYTHON, REPO, ServerProcess, write_json

SIM = REPO / "tools" / "sim" / "run.py"
MICROPYTHON = REPO / ".venv" / "bin" / "micropython"
WREN_BUILD = REPO / ".cache" / "firmware-host" / "micropython"  # make firmware-host; tools/sim/run.py runs it
QUESTION = "What time is it"
HEAP_RE = re.compile(
    r"heap: high-water (\d+) bytes allocated.*live peak (\d+) bytes after turns, heap (\d+) bytes"
)


def sim_turn(url: str, wav: Path, out_dir: Path, heap_kw: int, timeout: float = 45.0, codec: str = "pcm"
             ) -> dict:
    out = out_dir / f"reply-{codec}-{heap_kw}.wav"
    cmd = [
        PYTHON,
        str(SIM),
        "--mic",
        str(wav),
        "--server",
        url,
        "--out",
        str(out),
        "--mode",
        "manual",
        "--heap",
        f"{heap_kw}wk",
        "--turns",
        "1",
        "--timeout",
        str(timeout),
        "--codec",
        codec,
    ]
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 15, cwd=str(out_dir))
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        text, rc = str(exc.stdout or ""), -1
    passed = rc == 0 and "turn: done" in text and out.exists() and out.stat().st_size > 44 + 16000
    result = {"heap_kw": heap_kw, "passed": passed, "rc": rc, "seconds": round(time.monotonic() - started, 1)}
    m = HEAP_RE.search(text)
    if m:
        result.update(
            high_water_bytes=int(m.group(1)), live_peak_bytes=int(m.group(2)), heap_bytes=int(m.group(3))
        )
    if not passed:
        errors = [line for line in text.splitlines() if "Error" in line or "error" in line]
        result["why"] = (errors[-1] if errors else text.strip().splitlines()[-1] if text.strip() else "")[
            :160
        ]
    return result


def frame_cost(wav: Path, out_dir: Path, frames: int) -> dict:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "MICROPYPATH": f"{REPO / 'firmware'}:{REPO / 'firmware' / 'hal' / 'host'}:{REPO}:.frozen",
    }
    proc = subprocess.run(
        [
            str(MICROPYTHON),
            "-X",
            "heapsize=160wk",
            str(Path(__file__).with_name("mpy_audio_frame.py")),
            str(wav),
            str(out_dir / "frame-out.wav"),
            str(frames),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(out_dir),
    )
    m = re.search(
        r"FRAME-COST frames=(\d+) uplink_us=(\d+) downlink_us=(\d+) alloc_per_frame=([-\d.]+)", proc.stdout
    )
    if not m:
        return {"error": (proc.stdout + proc.stderr)[-300:]}
    n = int(m.group(1))
    return {
        "frames": n,
        "uplink_us_per_frame": round(int(m.group(2)) / n, 1),
        "downlink_us_per_frame": round(int(m.group(3)) / n, 1),
        "allocs_bytes_per_frame": float(m.group(4)),
    }


def smallest_heap(url: str, wav: Path, out_dir: Path, quick: bool, codec: str) -> dict:
    """Bisect -X heapsize for the smallest heap with which a full turn passes on one build."""
    tries: list[dict] = []
    default = sim_turn(url, wav, out_dir, 160, codec=codec)
    tries.append(default)
    if not default["passed"]:
        why = f"no full turn even at 160wk: {default.get('why')}"
        return {"status": "failed", "reason": why, "tries": tries}
    lo, hi = 8, 160  # lo: assumed failing, hi: passing
    step = 32 if quick else 4
    best = default
    while hi - lo > step:
        mid = (lo + hi) // 2
        res = sim_turn(url, wav, out_dir, mid, codec=codec)
        tries.append(res)
        if res["passed"]:
            hi, best = mid, res
        else:
            lo = mid
    return {
        "status": "measured",
        "min_heap_kb": hi,  # n of -X heapsize=<n>wk, i.e. KB on a 32-bit board
        "resolution_kb": step,
        "heap_peak_kb": round(best["high_water_bytes"] / 1024, 1) if "high_water_bytes" in best else None,
        "live_peak_kb": round(best["live_peak_bytes"] / 1024, 1) if "live_peak_bytes" in best else None,
        "at_default_160wk": {
            k: default.get(k) for k in ("high_water_bytes", "live_peak_bytes", "heap_bytes")
        },
        "tries": tries,
    }


def run(quick: bool, server: ServerProcess | None = None) -> dict:
    """The stock unix port with the PCM uplink (what `make deploy` puts on a stock MicroPython board) and,
    when `make firmware-host` has built it, the Wren build with Opus (the firmware the 64 KB target is for:
    `make flash` images)."""
    if not SIM.exists() or not MICROPYTHON.exists():
        return {"status": "pending", "reason": "tools/sim/run.py or .venv/bin/micropython missing"}
    from tests.support.spoken import spoken_wav

    own = server is None
    if own:
        server = ServerProcess().start()
    try:
        with tempfile.TemporaryDirectory(prefix="wren-bench-fw-") as tmp:
            tmp_path = Path(tmp)
            wav = spoken_wav(QUESTION, tmp_path / "question.wav")
            result = smallest_heap(server.ws_url, wav, tmp_path, quick, "pcm")
            if WREN_BUILD.exists():  # measured whatever the stock port did: the target is this build's
                result["opus"] = smallest_heap(server.ws_url, wav, tmp_path, quick, "opus")
            else:
                why = f"no Wren build at {WREN_BUILD}: make firmware-host"
                result["opus"] = {"status": "pending", "reason": why}
            cost = frame_cost(wav, tmp_path, 20 if quick else 200)
    finally:
        if own:
            server.stop()
    result.update(
        question=QUESTION,
        frame_ms=round((cost.get("uplink_us_per_frame", 0) + cost.get("downlink_us_per_frame", 0)) / 1000, 3)
        if "error" not in cost else None,
        allocs_per_frame=cost.get("allocs_bytes_per_frame"),
        frame_cost=cost,
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="coarse bisection (32 KB steps)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    res = run(args.quick)
    opus = res.get("opus") or {}
    for build, tries in (("stock, pcm", res.get("tries", [])), ("wren, opus", opus.get("tries", []))):
        for t in tries:
            verdict = "pass" if t["passed"] else "FAIL"
            print(f"  {build}: heap {t['heap_kw']:>4}wk: {verdict} ({t['seconds']} s) {t.get('why', '')}")
    print({k: v for k, v in res.items() if k not in ("tries", "opus")})
    print("wren, opus:", {k: v for k, v in opus.items() if k != "tries"})
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
