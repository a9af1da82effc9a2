"""Shared pieces of the Wren benchmarks: the server subprocess, spoken utterances, stats, timing logs.

The server always runs as its own process (`wren serve` on 127.0.0.1, ephemeral port) so the load
generator never shares its GIL. Client and server stamp events with `time.monotonic()`, which on Linux
is CLOCK_MONOTONIC, one clock for every process: client send times line up with the server's
`wren-timing` records without any clock sync.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

VENV_BIN = REPO / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable
FRAME_MS = 60
UPLINK_RATE = 16000
FRAME_SAMPLES = UPLINK_RATE * FRAME_MS // 1000
# Room noise under and between utterances, never digital zero: RMS 100 of int16 full scale is about
# -50 dBFS, a lived-in room (fridge, ventilation) through a MEMS mic: 30 dB SNR, as the issue asks. It is
# above the VAD's fixed energy gate ([vad] energy_gate_dbfs, -55), so only the noise-following gate
# ([vad] noise_gate_margin_db) spares Silero; `--env WREN_VAD_NOISE_GATE_MARGIN_DB=0` measures a room
# the gate cannot follow (Silero on every window).
NOISE_RMS = float(os.environ.get("WREN_BENCH_NOISE_RMS", "100"))

# Everyday requests and commands (more than 20, as the issue asks). Some hit builtin intents (time,
# date, names, volume through the device's MCP tool), others get its honest "not sure" answer: both
# are real turns with recognition, an engine reply, TTS and paced audio.
SENTENCES = [
    "What time is it",
    "What day is it today",
    "Hello there",
    "Thank you very much",
    "What can you do",
    "Set the volume to fifty",
    "Turn the volume up",
    "My name is Alice",
    "What is my name",
    "Good morning",
    "What is the date today",
    "Turn on the kitchen light",
    "Play some music",
    "What is the weather like tomorrow",
    "Set a timer for ten minutes",
    "Tell me a joke",
    "How are you today",
    "Remind me to call my mother",
    "Turn off the lights in the bedroom",
    "What is the capital of France",
    "Stop the music",
    "Open the garage door",
    "Good night",
    "Goodbye",
]


# ---- statistics -------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    data = sorted(v for v in values if v is not None and math.isfinite(v))
    if not data:
        return None
    rank = max(1, math.ceil(q / 100 * len(data)))
    return data[min(rank, len(data)) - 1]


def summary(values: list[float]) -> dict[str, float | int | None]:
    data = [v for v in values if v is not None and math.isfinite(v)]
    return {
        "n": len(data),
        "p50": _r(percentile(data, 50)),
        "p95": _r(percentile(data, 95)),
        "max": _r(max(data) if data else None),
    }


def hist_percentile(hist: dict[int, int], q: float) -> float | None:
    total = sum(hist.values())
    if not total:
        return None
    need = math.ceil(q / 100 * total)
    seen = 0
    for bucket in sorted(hist):
        seen += hist[bucket]
        if seen >= need:
            return float(bucket)
    return float(max(hist))


def merge_hists(hists: list[dict]) -> dict[int, int]:
    merged: dict[int, int] = {}
    for h in hists:
        for k, v in h.items():
            merged[int(k)] = merged.get(int(k), 0) + int(v)
    return merged


def _r(v: float | None, nd: int = 1) -> float | None:
    return None if v is None else round(v, nd)


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


# ---- audio ------------------------------------------------------------------------------------------


def room_noise(n_samples: int, seed: int) -> bytes:
    import numpy as np

    rng = np.random.default_rng(seed)
    return np.clip(rng.normal(0, NOISE_RMS, n_samples), -32768, 32767).astype("<i2").tobytes()


def with_noise(pcm: bytes, seed: int) -> bytes:
    """Room noise under an utterance (piper's padding is digital zero; a real mic never is)."""
    import numpy as np

    speech = np.frombuffer(pcm, dtype="<i2").astype(np.int32)
    noise = np.frombuffer(room_noise(len(speech), seed), dtype="<i2").astype(np.int32)
    return np.clip(speech + noise, -32768, 32767).astype("<i2").tobytes()


def pad_to_frame(pcm: bytes) -> bytes:
    frame_bytes = FRAME_SAMPLES * 2
    if len(pcm) % frame_bytes:
        pcm += bytes(frame_bytes - len(pcm) % frame_bytes)
    return pcm


def speech_end_frame(pcm: bytes, threshold: int = 500) -> int:
    """Index of the 60 ms frame holding the last clearly voiced sample (the end of speech)."""
    import numpy as np

    samples = np.abs(np.frombuffer(pcm, dtype="<i2").astype(np.int32))
    loud = np.nonzero(samples > threshold)[0]
    last = int(loud[-1]) if len(loud) else len(samples) - 1
    return last // FRAME_SAMPLES


def opus_packets(pcm: bytes) -> list[bytes]:
    """Encode once, like the device would (16 kHz mono, 60 ms, VOIP), so load clients only send bytes."""
    import opuslib_next

    encoder = opuslib_next.Encoder(UPLINK_RATE, 1, opuslib_next.APPLICATION_VOIP)
    pcm = pad_to_frame(pcm)
    step = FRAME_SAMPLES * 2
    return [bytes(encoder.encode(pcm[i : i + step], FRAME_SAMPLES)) for i in range(0, len(pcm), step)]


@dataclass
class Utterance:
    text: str
    packets: list[bytes]  # noise-covered utterance, Opus, 60 ms each
    speech_end: int  # index of the packet holding the end of speech

    @property
    def seconds(self) -> float:
        return len(self.packets) * FRAME_MS / 1000


def utterances(texts: list[str], tail_ms: int = 0) -> list[Utterance]:
    """Piper-spoken sentences (cached in .cache/spoken), noise-covered and pre-encoded."""
    from tests.support.spoken import spoken_pcm

    result = []
    for i, text in enumerate(texts):
        pcm = pad_to_frame(spoken_pcm(text, UPLINK_RATE, lead_ms=300, tail_ms=tail_ms))
        end = speech_end_frame(pcm)
        result.append(Utterance(text, opus_packets(with_noise(pcm, seed=1000 + i)), end))
    return result


def noise_packets(seconds: float = 6.0, seed: int = 7) -> list[bytes]:
    return opus_packets(room_noise(int(UPLINK_RATE * seconds), seed))


# ---- the server under test ----------------------------------------------------------------------------


@dataclass
class ServerProcess:
    """`wren serve` on 127.0.0.1 with an ephemeral port; its log goes to a file we parse."""

    env_overrides: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    port: int = 0
    log_path: Path | None = None
    _tmp: Any = None

    def start(self, timeout: float = 120.0) -> ServerProcess:
        self._tmp = tempfile.TemporaryDirectory(prefix="wren-bench-")
        tmp = Path(self._tmp.name)
        self.log_path = tmp / "server.log"
        # Simulated devices on a lab box: open mode (pairing is tested in tests/server/test_pairing.py).
        # Hundreds of simulated devices from 127.0.0.1: no per-address or global connection cap either.
        env = {**os.environ, "WREN_SERVER_DATA_DIR": str(tmp / "data"), "WREN_AUTH_MODE": "open",
               "WREN_LIMITS_CONNECTIONS_PER_IP": "0", "WREN_LIMITS_CONNECTIONS": "0",
               **self.env_overrides}
        env.pop("WREN_CONFIG", None)
        # WREN_BENCH_SERVER_TREE: serve from another checkout (e.g. `git archive <commit>` unpacked), so a
        # run measures a known commit rather than whatever the working tree holds right now.
        tree = Path(os.environ.get("WREN_BENCH_SERVER_TREE") or REPO)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [str(tree / "server"), str(tree), env.get("PYTHONPATH", "")] if p
        )
        stdout_path = tmp / "stdout.txt"
        self._stdout = open(stdout_path, "w")  # noqa: SIM115 - lives as long as the server
        self._log = open(self.log_path, "w")  # noqa: SIM115
        cmd = [PYTHON, "-m", "wren.cli", "serve", "--host", "127.0.0.1", "--port", "0", "--log-level", "INFO"]
        profile = os.environ.get("WREN_BENCH_PYSPY")  # profiling: py-spy record -o <path> (GIL holders only)
        if profile:
            fmt_name = "raw" if profile.endswith(".txt") else "flamegraph"
            only_gil = ["--gil"] if os.environ.get("WREN_BENCH_PYSPY_GIL", "1") == "1" else []
            cmd = [
                str(VENV_BIN / "py-spy"),
                "record",
                *only_gil,
                "--threads",
                "-r",
                "100",
                "-f",
                fmt_name,
                "-o",
                profile,
                "--",
                *cmd,
            ]
        self.proc = subprocess.Popen(
            cmd,
            cwd=str(tmp),
            env=env,
            stdout=self._stdout,
            stderr=self._log,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(r"listening on port (\d+)", stdout_path.read_text())
            if m:
                self.port = int(m.group(1))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"wren serve exited ({self.proc.returncode}):\n{self.log_text()[-3000:]}")
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("wren serve did not start in time")

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/xiaozhi/v1/"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        if os.environ.get("WREN_BENCH_PYSPY"):  # the server is py-spy's child
            import psutil

            children = psutil.Process(self.proc.pid).children()
            if children:
                return children[0].pid
        return self.proc.pid

    def rss_bytes(self, with_children: bool = False) -> int:
        """RSS of the server process (with_children: plus its ASR worker processes)."""
        import psutil

        proc = psutil.Process(self.pid)
        total = proc.memory_info().rss
        if with_children:
            for child in proc.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
        return int(total)

    def metrics(self) -> dict[str, float]:
        """The server's `/metrics` samples (tests/support/metrics.py); {} if they cannot be read (the
        numbers derived from them are then left out, not faked)."""
        import urllib.request

        from tests.support.metrics import samples

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as resp:
                return samples(resp.read().decode())
        except OSError:
            return {}

    def cpu_seconds(self) -> float:
        import psutil

        t = psutil.Process(self.pid).cpu_times()
        return float(t.user + t.system)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def log_size(self) -> int:
        return self.log_path.stat().st_size if self.log_path and self.log_path.exists() else 0

    def timing_records(self, kind: str, since_offset: int = 0) -> list[dict]:
        """`wren-timing <kind> {json}` log records written after byte `since_offset`."""
        if not self.log_path:
            return []
        with open(self.log_path, "rb") as f:
            f.seek(since_offset)
            text = f.read().decode(errors="replace")
        marker = f"wren-timing {kind} "
        records = []
        for line in text.splitlines():
            at = line.find(marker)
            if at >= 0:
                with contextlib.suppress(ValueError):
                    records.append(json.loads(line[at + len(marker) :]))
        return records

    def errors(self, since_offset: int = 0) -> list[str]:
        with open(self.log_path, "rb") as f:  # type: ignore[arg-type]
            f.seek(since_offset)
            text = f.read().decode(errors="replace")
        return [line for line in text.splitlines() if " ERROR " in line or "Traceback" in line]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if os.environ.get("WREN_BENCH_PYSPY"):
                server_pid = self.pid
                self.proc.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(30)
                with contextlib.suppress(OSError):
                    os.kill(server_pid, signal.SIGTERM)  # if py-spy left its child running
            else:
                self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for f in (getattr(self, "_stdout", None), getattr(self, "_log", None)):
            if f is not None:
                f.close()
        keep = os.environ.get("WREN_BENCH_LOG_DIR")  # keep server logs for a post-mortem
        if keep and self.log_path and self.log_path.exists():
            Path(keep).mkdir(parents=True, exist_ok=True)
            target = Path(keep) / f"server-{self.port}.log"
            target.write_bytes(self.log_path.read_bytes())
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def thread_schedstat(pid: int, tid: int | None = None) -> tuple[float, float] | None:
    """(seconds on a core, seconds runnable but waiting for one) of a thread so far, from Linux's
    /proc/<pid>/task/<tid>/schedstat (the main thread, where `wren serve` runs its event loop, by default);
    None where there is no such file (another OS, or a kernel without schedstats)."""
    try:
        fields = Path(f"/proc/{pid}/task/{tid or pid}/schedstat").read_text().split()
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def box_steal() -> tuple[float, float] | None:
    """(ticks stolen by the hypervisor, all ticks) of every CPU of the box so far, from Linux's /proc/stat:
    on a shared virtual machine a neighbour's load takes cores from a run in bursts, and this says how much
    (a run at 200 devices went from 160 ms to 3.4 s of lag p99 on the same code minutes apart). None
    elsewhere."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        ticks = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
        return float(ticks[7]), float(sum(ticks))
    except (OSError, ValueError, IndexError):
        return None


def stolen_pct(start: tuple[float, float] | None, end: tuple[float, float] | None) -> float | None:
    """The share of the box's CPU time the hypervisor gave to others between two `box_steal()` readings."""
    if not start or not end or end[1] <= start[1]:
        return None
    return round((end[0] - start[0]) / (end[1] - start[1]) * 100, 1)


def device_id(run: int, index: int) -> str:
    """MAC-shaped, unique per benchmark run and device."""
    return f"02:be:{run & 0xFF:02x}:{(index >> 16) & 0xFF:02x}:{(index >> 8) & 0xFF:02x}:{index & 0xFF:02x}"


def box_speed() -> dict[str, float]:
    """How fast this box is right now, so that runs on different days can be compared: the same cloud
    machine has measured anywhere from 94 to 527 µs for one Silero window. Best of three, ≈1 s in all."""
    import numpy as np
    from wren.speech.vad import SileroVadModel

    vad = SileroVadModel(energy_gate_dbfs=-200.0)
    window, state = np.zeros((1, 576), dtype=np.float32), vad.initial_state()  # one window, one stream

    def silero(windows: int = 300) -> float:
        nonlocal state
        started = time.perf_counter()
        for _ in range(windows):
            _, state = vad.score(window, state)
        return (time.perf_counter() - started) / windows * 1e6

    silero(50)  # warm-up
    return {"python_loop_1m_ms": round(min(loop_speed_probe(1_000_000) for _ in range(3)), 1),
            "silero_window_us": round(min(silero() for _ in range(3)), 1)}


def loop_speed_probe(steps: int = 100_000) -> float:
    """The box's speed now, cheaply enough to take every second of a run (≈ 3 ms): a short Python loop's own
    CPU time (this thread's, so waiting for a core does not count), scaled to ms per 1M steps as
    `box_speed`'s loop. On a shared virtual machine it moves with the neighbours: the same box ran the loop
    in 34 ms and in 62 ms minutes apart, with no CPU time counted as stolen."""
    started, total = time.thread_time(), 0
    for i in range(steps):
        total += i
    return (time.thread_time() - started) * 1000 * 1_000_000 / steps


def speed_line(speed: dict[str, float] | None) -> str:
    if not speed:
        return "box speed not measured"
    return (f"box speed: a 1M-step Python loop {speed['python_loop_1m_ms']:.0f} ms, one Silero window "
            f"{speed['silero_window_us']:.0f} µs")


def machine() -> dict[str, Any]:
    import platform

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = 0
    return {
        "cores": os.cpu_count(),
        "cpu": model or platform.processor(),
        "memory_gb": round(mem / 2**30, 1),
        "python": platform.python_version(),
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        "speed": box_speed(),
    }


def write_json(path: str | None, data: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "n/a"
    text = (f"{v:.0f}" if abs(v) >= 100 else f"{v:.1f}") if isinstance(v, float) else str(v)
    return text + unit
