"""`GET /metrics`: the server's counters and latency histograms in the Prometheus text format.

One `ServerMetrics` per server app, with its own `CollectorRegistry` (never the process-global one, so
several servers in one process, as in the tests, keep apart). What feeds it:

- the turn and uplink timing records (`wren.pipeline.timing`): this object is the `TimingSink` in
  `SessionServices.timing`, so every finished turn and every processed uplink frame is observed as it
  happens (a dict look-up and a histogram bucket; no I/O);
- the sessions: the transport tells it when a session opens and when it has closed; dropped input is read
  from the open sessions at scrape time and folded into running totals when a session closes, so the
  counters are live and never go back;
- the speech stack and the executors, read at scrape time (queue depths).

Every metric is listed in docs/server.md "Metrics".
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.utils import floatToGoString

from wren.config import package_version
from wren.transport.overload import OverloadWatch
from wren.transport.thread_cpu import cpu_by_thread

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"

# The spans of TurnTiming.split_ms(), in the order they happen.
TURN_STAGES = (
    "asr_finalise",
    "queue_to_start",
    "engine_first_sentence",
    "tts_first_audio",
    "encode",
    "send",
    "input_end_to_first_audio",
    "input_end_to_hold",
)
STAGE_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0)
LAG_BUCKETS_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
DROPPED_KINDS = ("before_hello", "binary_not_listening", "bad_binary", "malformed_json", "unknown_type")
DEVICE_STATES = ("idle", "listening", "speaking")


class ServerMetrics:
    """The metrics of one server app; also the `TimingSink` of its sessions."""

    def __init__(self, speech: Any = None, executors: dict[str, Any] | None = None) -> None:
        self.registry = CollectorRegistry()
        self.speech = speech
        self.executors = dict(executors or {})
        self._open: set[Any] = set()  # sessions whose dropped input is read live
        self._closed_dropped = dict.fromkeys(DROPPED_KINDS, 0)  # ... and what closed sessions dropped
        self.turns = Counter(
            "wren_turns", "Reply turns finished, by source (speech, text, prompt) and whether cancelled.",
            ["source", "cancelled"], registry=self.registry,
        )
        self.turn_stage = Histogram(
            "wren_turn_stage_seconds", "Latency of each stage of a reply turn (the turn timing records).",
            ["stage"], buckets=STAGE_BUCKETS_S, registry=self.registry,
        )
        self.lag = LagHistogram(LAG_BUCKETS_S)
        self.overload = OverloadWatch(lambda: len(self._open))  # the log line when the uplink falls behind
        for source in ("speech", "text", "prompt"):  # present (at 0) from the first scrape
            for cancelled in ("false", "true"):
                self.turns.labels(source, cancelled)
        for stage in TURN_STAGES:
            self.turn_stage.labels(stage)
        self.registry.register(_LiveCollector(self))
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, process_resident_memory_bytes…

    # ---- TimingSink (wren.pipeline.timing) --------------------------------------------------------

    def turn_finished(self, record: dict) -> None:
        self.turns.labels(str(record.get("source", "speech")),
                          "true" if record.get("cancelled") else "false").inc()
        spans = record.get("ms") or {}
        for stage in TURN_STAGES:
            ms = spans.get(stage)
            if ms is not None:
                self.turn_stage.labels(stage).observe(max(0.0, ms) / 1000)

    def uplink_lag(self, lag_ms: float) -> None:
        self.lag.observe(lag_ms / 1000)
        self.overload.observe(lag_ms)

    # ---- sessions (called by wren.transport.websocket) ----------------------------------------------

    def session_opened(self, session: Any) -> None:
        self._open.add(session)

    def session_closed(self, session: Any) -> None:
        """After `session.close()`: its final counts join the totals, in the same step it stops being read."""
        if session not in self._open:
            return
        self._open.discard(session)
        for kind, count in _dropped(session).items():
            self._closed_dropped[kind] = self._closed_dropped.get(kind, 0) + count

    # ---- scrape ------------------------------------------------------------------------------------

    def dropped_totals(self) -> dict[str, int]:
        totals = dict(self._closed_dropped)
        for session in list(self._open):
            for kind, count in _dropped(session).items():
                totals[kind] = totals.get(kind, 0) + count
        return totals

    def device_states(self) -> dict[str, int]:
        states = dict.fromkeys(DEVICE_STATES, 0)
        for session in list(self._open):
            state = getattr(getattr(session, "state", None), "value", "idle")
            states[state] = states.get(state, 0) + 1
        return states

    def handler(self) -> Any:
        return make_aiohttp_handler(self.registry)


def _dropped(session: Any) -> dict[str, int]:
    counts = getattr(session, "dropped_counts", None)
    return counts() if callable(counts) else {}


def _queue_size(executor: Any) -> int | None:
    waiting = getattr(executor, "waiting", None)  # wren.pipeline.tts_scheduler.TtsScheduler: jobs waiting
    if isinstance(waiting, int):
        return waiting
    queue = getattr(executor, "_work_queue", None)  # ThreadPoolExecutor: work not yet taken by a thread
    try:
        return int(queue.qsize()) if queue is not None else None
    except (AttributeError, NotImplementedError):
        return None


class LagHistogram:
    """`wren_uplink_lag_seconds`, observed once per uplink frame of every device (3,000+ a second at 200
    devices), on the event loop only. A prometheus `Histogram` takes a lock and walks its buckets in Python
    per observation (3 % of the server's GIL time with 20 streaming devices); this is one `bisect` and two
    additions, and the cumulative buckets are built at scrape time."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.bounds = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one: above the largest bound (+Inf)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        seconds = seconds if seconds > 0.0 else 0.0
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def family(self) -> HistogramMetricFamily:
        cumulative, buckets = 0, []
        for bound, count in zip((*map(floatToGoString, self.bounds), "+Inf"), self.counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        return HistogramMetricFamily(
            "wren_uplink_lag_seconds",
            "How far behind real time each uplink audio frame finished decode, VAD and ASR.",
            buckets=buckets, sum_value=self.sum,
        )


class _LiveCollector:
    """What is read at scrape time: devices, dropped input, queue depths, the version."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._m = metrics

    def describe(self) -> Iterable[Metric]:
        return []  # nothing fixed to describe: the registry then collects on demand only

    def collect(self) -> Iterator[Metric]:
        m = self._m
        info = GaugeMetricFamily("wren_build_info", "The Wren version serving (always 1).",
                                 labels=["version"])
        info.add_metric([package_version()], 1)
        yield info
        yield m.lag.family()
        devices = GaugeMetricFamily("wren_devices_connected", "Device sockets with a live session, by state.",
                                    labels=["state"])
        for state, count in m.device_states().items():
            devices.add_metric([state], count)
        yield devices
        dropped = CounterMetricFamily(
            "wren_dropped_input", "Device input dropped and counted instead of failing the session, by kind.",
            labels=["kind"],
        )
        for kind, count in m.dropped_totals().items():
            dropped.add_metric([kind], count)
        yield dropped
        pools = GaugeMetricFamily("wren_executor_queue_depth",
                                  "CPU work waiting for a thread: listen (decode, VAD, ASR), speak (TTS).",
                                  labels=["pool"])
        for name, executor in m.executors.items():
            size = _queue_size(executor)
            if size is not None:
                pools.add_metric([name], size)
        yield pools
        threads = CounterMetricFamily(
            "wren_thread_cpu_seconds", "CPU seconds of each thread, by name (MainThread: the event loop); "
            "(other): threads Python did not start (ONNX Runtime's) and ended ones.", labels=["thread"],
        )
        for name, seconds in sorted(cpu_by_thread().items()):
            threads.add_metric([name], seconds)
        yield threads
        yield from self._asr()

    def _asr(self) -> Iterator[Metric]:
        asr = getattr(self._m.speech, "asr", None)
        yield from _asr_streams(asr)
        scheduler = getattr(asr, "scheduler", None)  # moonshine only
        if scheduler is None:
            return
        yield GaugeMetricFamily("wren_asr_decode_queue_depth",
                                "Moonshine decodes waiting for a thread (urgent, commit, speculative).",
                                value=getattr(scheduler, "waiting", 0))
        yield CounterMetricFamily("wren_asr_speculative_dropped",
                                  "Moonshine speculative decodes dropped because too many were waiting.",
                                  value=getattr(scheduler, "dropped_speculative", 0))
        ran, cpu = getattr(scheduler, "ran", None), getattr(scheduler, "cpu_seconds", None)
        if ran is None or cpu is None:
            return
        decodes = CounterMetricFamily("wren_asr_decodes", "Moonshine decodes run, by class.",
                                      labels=["class"])
        seconds = CounterMetricFamily("wren_asr_decode_cpu_seconds",
                                      "CPU seconds of the Moonshine decodes run, by class.", labels=["class"])
        for label, count in ran.items():
            decodes.add_metric([label], count)
            seconds.add_metric([label], cpu.get(label, 0.0))
        yield decodes
        yield seconds
        stats = getattr(asr, "stats", None)
        if stats is not None:
            ends = CounterMetricFamily(
                "wren_asr_utterance_ends", "Utterances ended: words ready from the guess at the pause, or "
                "decoded then (urgent).", labels=["words"])
            ends.add_metric(["guessed"], stats.speculation_used)
            ends.add_metric(["decoded"], stats.urgent_runs)
            yield ends


def _asr_streams(asr: Any) -> Iterator[Metric]:
    """The stream ceiling (`wren.speech.asr.cap`, every engine) and, with worker processes, their health."""
    cap = getattr(asr, "streams", None)
    if cap is not None and hasattr(cap, "refused"):
        yield GaugeMetricFamily("wren_asr_streams_open",
                                "ASR streams open now (each holds a recogniser), at most asr_streams.",
                                value=getattr(cap, "open", 0))
        yield CounterMetricFamily("wren_asr_streams_refused",
                                  "Utterances not listened to: no recogniser was free.",
                                  value=getattr(cap, "refused", 0))
    health = getattr(asr, "health", None)  # ASR worker processes only
    if callable(health):
        state = health()
        yield GaugeMetricFamily("wren_asr_workers_up", "ASR worker processes loaded and answering.",
                                value=state.up)
        yield CounterMetricFamily("wren_asr_worker_restarts", "ASR worker processes restarted.",
                                  value=state.restarts)


def add_metrics_route(app: web.Application, metrics: ServerMetrics) -> None:
    app.router.add_get(METRICS_PATH, metrics.handler())
