"""The concurrency bench says which of the server's threads had the cores during a run, from the server's
`wren_thread_cpu_seconds` counters: what grew, by group, in % of one core; nothing without the counters."""

from __future__ import annotations

from tools.bench.concurrency import thread_cpu


def counters(**seconds: float) -> dict[str, float]:
    return {f'wren_thread_cpu_seconds_total{{thread="{name}"}}': value for name, value in seconds.items()}


def test_what_each_group_of_threads_spent_during_the_run_is_a_share_of_one_core() -> None:
    before = counters(MainThread=10.0, **{"wren-moonshine-0": 4.0, "wren-moonshine-spill-0": 1.0,
                                          "wren-speak_0": 2.0, "(other)": 1.0})
    after = counters(MainThread=16.5, **{"wren-moonshine-0": 9.0, "wren-moonshine-spill-0": 2.5,
                                         "wren-speak_0": 3.0, "wren-speak_1": 1.0, "(other)": 1.5,
                                         "wren-sessions_0": 0.2})
    shares = thread_cpu(before, after, span_s=10.0)
    assert shares == {"event loop": 65, "Moonshine spill": 15, "Moonshine": 50, "synthesis": 20,
                      "ONNX Runtime pools and ended threads": 5, "the rest": 2}


def test_a_server_without_thread_counters_reports_nothing() -> None:
    assert thread_cpu({}, {}, span_s=10.0) is None
    assert thread_cpu({"wren_build_info{}": 1}, {"wren_build_info{}": 1}, span_s=10.0) is None
