"""Concurrency: N devices listening (auto mode) and streaming room noise at real-time pace, each saying one
piper-spoken utterance in a staggered 30 s cycle; does uplink processing keep up, does every utterance
get its answer?

Load generation stays cheap so it measures the server, not itself (it shares the box's cores): every frame
is Opus-encoded once in the parent (noise loop + utterances), workers only send bytes and never decode
reply audio, and for N > 50 the devices are split over two worker processes (`streaming_devices.py`). Each
device is a tests/support/device.py TestDevice: hello, device MCP, `listen start` (auto), then its uplink,
paced by the worker's one `UplinkClock`, over a timeline of noise → utterance → noise; while the server
speaks, the device does not upload (as a stock device without AEC), and after `tts stop` it sends `listen
start` again. This module is the parent: it plans the devices, starts the workers, and measures the server.

Uplink lag (server side, per frame, from the `wren-timing uplink` records): the time at which the
server finished processing a frame (decode + resample + VAD + ASR accept) minus the frame's slot on the
real-time schedule of its stream (anchored at the earliest arrival; see wren/pipeline/timing.py). It
includes socket/event-loop backlog, inbox queueing, executor wait and the work itself. The client's own
send lag (actual send time minus the frame's slot) is reported too, to show the load generator kept up.

The bench server runs with `WREN_VAD_NO_SPEECH_TIMEOUT_S=120`: with the default 8 s, three silent
auto-mode windows in a row make the session give up and close (the rule of three), which is the right
product behaviour but would end a device that is quiet for 25 s of its 30 s cycle.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pickle
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from wren.speech.asr.moonshine.scheduler import CLASS_NAMES as ASR_CLASSES

from tools.bench.common import (
    FRAME_MS,
    PYTHON,
    SENTENCES,
    ServerProcess,
    box_speed,
    box_steal,
    device_id,
    fmt,
    hist_percentile,
    loop_speed_probe,
    merge_hists,
    ms,
    noise_packets,
    percentile,
    speed_line,
    stolen_pct,
    summary,
    thread_schedstat,
    utterances,
    write_json,
)

LOAD_WORKER = Path(__file__).with_name("streaming_devices.py")  # one process's share of the devices
SERVER_ENV = {"WREN_VAD_NO_SPEECH_TIMEOUT_S": "120"}
SILENT_OFFSET_S = 1e9  # an utterance slot no run reaches
REPLY_ALLOWANCE_S = 8.0  # after the last utterance: silence window + ASR + reply playback
HARD_EXTRA_S = 10.0  # a device still waiting for its reply gives up this long after the window


def run_n(
    server: ServerProcess, n: int, speak_span_s: float, run_id: int, packets_file: str, silent: bool = False
) -> dict:
    import psutil

    rng = random.Random(run_id)
    workers = 1 if n <= 50 else 2
    connect_s = 2.0 + n * 0.04
    t0 = time.monotonic() + connect_s
    longest = 4.0
    # Quiet devices keep streaming until then; a device still waiting for its reply goes on (hard_end).
    window_end = t0 + 1.0 + speak_span_s + longest + min(REPLY_ALLOWANCE_S, speak_span_s)
    devices = [
        {
            "id": device_id(run_id, i),
            "sentence": i % len(SENTENCES),
            # silent: never speak (what a stream of room noise alone costs the server)
            "offset": SILENT_OFFSET_S if silent else 1.0 + (i + rng.random()) * speak_span_s / n,
            "phase": rng.random() * FRAME_MS / 1000,
            "noise_start": rng.randrange(1000),
        }
        for i in range(n)
    ]
    log_offset = server.log_size()
    metrics_before = server.metrics()
    tmp = Path(tempfile.mkdtemp(prefix="wren-bench-load-"))
    procs = []
    for w in range(workers):
        spec = {
            "url": server.ws_url,
            "t0": t0,
            "window_end": window_end,
            "hard_end": window_end + HARD_EXTRA_S,
            "packets_file": packets_file,
            "devices": devices[w::workers],
        }
        (tmp / f"spec{w}.json").write_text(json.dumps(spec))
        procs.append(
            subprocess.Popen(
                [PYTHON, str(LOAD_WORKER), str(tmp / f"spec{w}.json"), str(tmp / f"result{w}.json")]
            )
        )
    server_proc = psutil.Process(server.pid)

    def cpu() -> tuple[float, float, tuple[float, float] | None, tuple[float, float] | None]:
        """CPU seconds of the server process and of its children (ASR worker processes), the event
        loop thread's seconds on a core and waiting for one, and the box's stolen ticks."""
        main = sum(server_proc.cpu_times()[:2])
        kids = 0.0
        for child in server_proc.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                kids += sum(child.cpu_times()[:2])
        return main, kids, thread_schedstat(server.pid), box_steal()

    rss_peak = server.rss_bytes()
    cpu_start = cpu_end = None
    threads_start: dict[str, float] = {}  # /metrics at the measured window's start and end: CPU by thread
    threads_end: dict[str, float] = {}
    speeds: list[float] = []  # the box's speed each second of the measured window (`loop_speed_probe`)
    next_probe = t0
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if cpu_start is None and now >= t0:
            cpu_start = (now, *cpu())
            threads_start = server.metrics()
        if cpu_start is not None and cpu_end is None and now >= window_end:
            cpu_end = (now, *cpu())
            threads_end = server.metrics()
        if cpu_start is not None and cpu_end is None and now >= next_probe:
            speeds.append(loop_speed_probe())
            next_probe = now + 1.0
        rss_peak = max(rss_peak, server.rss_bytes())
        time.sleep(0.25)
    if cpu_end is None:
        cpu_end = (time.monotonic(), *cpu())
        threads_end = server.metrics()
    results = []
    for w, p in enumerate(procs):
        path = tmp / f"result{w}.json"
        results.append(json.loads(path.read_text()) if p.returncode == 0 and path.exists() else None)
    ids = {d["id"] for d in devices}
    uplink: list[dict] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        uplink = [r for r in server.timing_records("uplink", log_offset) if r.get("device") in ids]
        if len(uplink) >= n:
            break
        time.sleep(0.5)
    out = _aggregate(n, workers, results, uplink, server, log_offset, rss_peak, cpu_start, cpu_end)
    if speeds:
        out["box_loop_1m_ms"] = {"p50": round(percentile(speeds, 50), 1), "max": round(max(speeds), 1)}
    metrics_after = server.metrics()
    out["asr"] = asr_work(metrics_before, metrics_after, out["utterances"])
    if cpu_start and cpu_end:  # the same window as the server's CPU and the loop's share above
        out["threads_cpu_pct"] = thread_cpu(threads_start, threads_end, cpu_end[0] - cpu_start[0])
    return out


def asr_work(before: dict[str, float], after: dict[str, float], utterances: int) -> dict | None:
    """The recogniser's work during the run, from the server's Moonshine counters: decodes and CPU seconds
    by class, and decodes per utterance (a guess the speaker spoke past is CPU for nothing)."""
    names = [f'wren_asr_decodes_total{{class="{c}"}}' for c in ASR_CLASSES]
    if not all(name in before and name in after for name in names):
        return None  # not Moonshine, or /metrics unreadable

    def grew(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    out: dict[str, Any] = {}
    for c in ASR_CLASSES:
        out[c] = {"decodes": int(grew(f'wren_asr_decodes_total{{class="{c}"}}')),
                  "cpu_s": round(grew(f'wren_asr_decode_cpu_seconds_total{{class="{c}"}}'), 1)}
    out["ends_guessed"] = int(grew('wren_asr_utterance_ends_total{words="guessed"}'))
    out["ends_decoded"] = int(grew('wren_asr_utterance_ends_total{words="decoded"}'))
    if utterances:
        out["decodes_per_utterance"] = round(sum(out[c]["decodes"] for c in ASR_CLASSES) / utterances, 2)
    return out


THREAD_GROUPS = (  # the server's threads by name prefix (`wren_thread_cpu_seconds`), first match wins
    ("event loop", "MainThread"),
    ("Moonshine spill", "wren-moonshine-spill"),
    ("Moonshine", "wren-moonshine"),
    ("synthesis", "wren-speak"),
    ("ONNX Runtime pools and ended threads", "(other)"),
    ("the rest", ""),
)


def thread_cpu(before: dict[str, float], after: dict[str, float], span_s: float) -> dict[str, int] | None:
    """The server's CPU during the run by thread group, in % of one core, from `wren_thread_cpu_seconds`
    (which thread had the cores: the event loop, the recogniser, synthesis); None without those counters."""
    prefix = 'wren_thread_cpu_seconds_total{thread="'
    grew: dict[str, float] = {}
    for name, value in after.items():
        if name.startswith(prefix):
            thread = name[len(prefix) : -2]
            grew[thread] = value - before.get(name, 0.0)
    if not grew or span_s <= 0:
        return None
    out = dict.fromkeys((group for group, _ in THREAD_GROUPS), 0.0)
    for thread, seconds in grew.items():
        group = next(group for group, start in THREAD_GROUPS if thread.startswith(start))
        out[group] += seconds
    return {group: round(seconds / span_s * 100) for group, seconds in out.items()}


def _aggregate(
    n: int,
    workers: int,
    results: list,
    uplink: list[dict],
    server: ServerProcess,
    log_offset: int,
    rss_peak: int,
    cpu_start: Any,
    cpu_end: Any,
) -> dict:
    devs = [d for r in results if r for d in r["devices"]]
    spoke = [d for d in devs if "end_of_speech" in d]
    answered = [d for d in spoke if "tts_stop_at" in d and d.get("reply_frames", 0) > 0]
    lag_hist = merge_hists([r["lag_hist"] for r in uplink])
    proc_hist = merge_hists([r["proc_hist"] for r in uplink])
    out: dict[str, Any] = {
        "n": n,
        "client_processes": workers,
        "worker_failures": sum(1 for r in results if r is None),
        "connected": sum(1 for d in devs if d.get("connected")),
        "utterances": len(spoke),
        "answered": len(answered),
        "errors": sorted({d["error"] for d in devs if "error" in d})[:5],
        # What went wrong for the ones not answered: heard as what (None: no stt), did a reply start?
        "unanswered": [
            {"id": d["id"], "said": d["text"], "stt": d.get("stt"), "tts_start": "tts_start_at" in d,
             "reply_frames": d.get("reply_frames", 0)}
            for d in spoke if d not in answered
        ][:5],
        "uplink_lag_ms": {
            "p50": hist_percentile(lag_hist, 50),
            "p99": hist_percentile(lag_hist, 99),
            "max": round(max((r["max_lag_ms"] for r in uplink), default=0.0), 1) if uplink else None,
            "frames": sum(lag_hist.values()),
            "sessions": len(uplink),
        },
        "uplink_processing_ms": {
            "p50": hist_percentile(proc_hist, 50),
            "p99": hist_percentile(proc_hist, 99),
        },
        "end_of_speech_to_stt_ms": summary(
            [ms(d["stt_at"] - d["end_of_speech"]) for d in spoke if "stt_at" in d]
        ),
        "end_of_speech_to_first_audio_ms": summary(
            [ms(d["first_audio_at"] - d["end_of_speech"]) for d in spoke if "first_audio_at" in d]
        ),
        # The answer's own first audio: later than the first audio when the reply began with the hold phrase.
        "end_of_speech_to_answer_audio_ms": summary(
            [ms(d["answer_audio_at"] - d["end_of_speech"]) for d in spoke if "answer_audio_at" in d]
        ),
        "held": sum(1 for d in spoke if d.get("held")),
        "client_send_lag_ms": {
            "p99": max((r["send_lag_ms"]["p99"] or 0 for r in results if r), default=None),
            "max": max((r["send_lag_ms"]["max"] or 0 for r in results if r), default=None),
        },
        "client_cpu_s": round(sum(r["cpu_s"] for r in results if r), 1),
        "server_rss_peak_mb": round(rss_peak / 2**20, 1),
        "server_errors": len(server.errors(log_offset)),
    }
    p99 = out["end_of_speech_to_stt_ms"]
    p99["p99"] = percentile([ms(d["stt_at"] - d["end_of_speech"]) for d in spoke if "stt_at" in d], 99)
    if cpu_start and cpu_end and cpu_end[0] > cpu_start[0]:
        span = cpu_end[0] - cpu_start[0]
        out["server_cpu_pct_of_one_core"] = round((cpu_end[1] - cpu_start[1]) / span * 100)
        out["asr_workers_cpu_pct_of_one_core"] = round((cpu_end[2] - cpu_start[2]) / span * 100)
        if cpu_start[3] and cpu_end[3]:
            # The event loop, which moves every device's audio: its share of a core, and how long it was
            # ready to run but every core was taken (the box is full, not the loop too slow).
            out["loop_on_core_pct"] = round((cpu_end[3][0] - cpu_start[3][0]) / span * 100)
            out["loop_waiting_for_core_pct"] = round((cpu_end[3][1] - cpu_start[3][1]) / span * 100)
        out["box_stolen_pct"] = stolen_pct(cpu_start[4], cpu_end[4])
    return out


def run(server: ServerProcess, quick: bool, counts: list[int] | None = None, silent: bool = False) -> dict:
    counts = counts or ([3] if quick else [10, 50, 100, 200])
    span = 4.0 if quick else 30.0
    utts = utterances(SENTENCES)
    noise = noise_packets()
    with tempfile.NamedTemporaryFile(prefix="wren-bench-packets-", suffix=".pkl", delete=False) as f:
        pickle.dump((utts, noise), f)
        packets_file = f.name
    try:
        rows = []
        for i, n in enumerate(counts):
            rows.append(run_n(server, n, span, 100 + i, packets_file, silent))
            time.sleep(1.0)
        return {"server_env": SERVER_ENV, "speak_span_s": span, "silent": silent, "rows": rows}
    finally:
        Path(packets_file).unlink(missing_ok=True)


def print_table(res: dict) -> None:
    print(
        f"{'N':>4} {'answered':>9} {'uplink lag p99':>15} {'proc p99':>9} {'eos→stt p50/p99':>16} "
        f"{'eos→audio p50/p95':>18} {'answer p50/p95':>15} {'held':>5} {'send lag p99':>12} {'srv CPU':>8} "
        f"{'loop run/wait':>14} {'stolen':>7} {'box loop p50/max':>17}"
    )
    for r in res["rows"]:
        s, a = r["end_of_speech_to_stt_ms"], r["end_of_speech_to_first_audio_ms"]
        w = r.get("end_of_speech_to_answer_audio_ms") or {"p50": None, "p95": None}
        speed = r.get("box_loop_1m_ms") or {}
        print(
            f"{r['n']:>4} {r['answered']:>4}/{r['utterances']:<4} "
            f"{fmt(r['uplink_lag_ms']['p99'], ' ms'):>15} "
            f"{fmt(r['uplink_processing_ms']['p99'], ' ms'):>9} {fmt(s['p50']) + '/' + fmt(s['p99']):>16} "
            f"{fmt(a['p50']) + '/' + fmt(a['p95']):>18} {fmt(w['p50']) + '/' + fmt(w['p95']):>15} "
            f"{r.get('held', 0):>5} {fmt(r['client_send_lag_ms']['p99'], ' ms'):>12} "
            f"{fmt(r.get('server_cpu_pct_of_one_core'), '%'):>8} "
            f"{fmt(r.get('loop_on_core_pct'), '%') + '/' + fmt(r.get('loop_waiting_for_core_pct'), '%'):>14} "
            f"{fmt(r.get('box_stolen_pct'), '%'):>7} "
            f"{fmt(speed.get('p50')) + '/' + fmt(speed.get('max'), ' ms'):>17}"
        )
    for r in res["rows"]:
        asr = r.get("asr")
        if asr:
            by_class = ", ".join(f"{c} {asr[c]['decodes']} ({asr[c]['cpu_s']})" for c in ASR_CLASSES)
            print(f"N = {r['n']}: Moonshine decodes (CPU s) {by_class}; "
                  f"{asr.get('decodes_per_utterance')} per utterance; words from the guess at the pause "
                  f"{asr['ends_guessed']}, decoded at the end {asr['ends_decoded']}")
        threads = r.get("threads_cpu_pct")
        if threads:
            print(f"N = {r['n']}: server CPU by thread (% of one core over the run): "
                  + ", ".join(f"{group} {pct}" for group, pct in threads.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 3 with a 4 s cycle")
    parser.add_argument("--n", type=int, nargs="*", help="device counts (default 10 50 100 200)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--env", nargs="*", help="extra server environment, KEY=VALUE (experiments)")
    parser.add_argument("--silent", action="store_true",
                        help="devices only stream room noise: the server's cost of a stream alone")
    args = parser.parse_args()
    env = dict(SERVER_ENV)
    for item in args.env or []:  # experiments: --env WREN_ASR_POOL_SIZE=8
        key, _, value = item.partition("=")
        env[key] = value
    with ServerProcess(env_overrides=env) as server:
        res = run(server, args.quick, args.n, args.silent)
    res["speed"] = box_speed()
    print_table(res)
    print(speed_line(res["speed"]))
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
