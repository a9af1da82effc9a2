"""The log line when the uplink falls behind (wren.transport.overload): a box past its capacity says so,
once a minute at most, and says when it is back; a box within it says nothing. A clock of our own stands
in for time; the last test drives it through a real server's metrics sink."""

from __future__ import annotations

import logging

import pytest
from wren.transport.metrics import ServerMetrics
from wren.transport.overload import LATE_MS, REPEAT_S, WINDOW_S, OverloadWatch

FRAMES_A_SECOND = 16  # one device's 60 ms frames


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def feed(watch: OverloadWatch, clock: Clock, seconds: float, late_every: int = 0, lag_ms: float = 400.0,
         devices: int = 10) -> None:
    """`devices` streaming for `seconds`; every `late_every`-th frame `lag_ms` late, the rest on time."""
    frames = int(seconds * FRAMES_A_SECOND) * devices
    for i in range(frames):
        clock.now += 1 / (FRAMES_A_SECOND * devices)
        late = late_every and i % late_every == 0
        watch.observe(lag_ms if late else 20.0)


def overload_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "wren.transport.overload"]


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_a_box_within_its_capacity_logs_nothing(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "wren.transport.overload")
    watch = OverloadWatch(lambda: 10, clock)
    feed(watch, clock, 5 * WINDOW_S, late_every=200)  # 0.5 % of frames late: a hiccup, not a backlog
    assert overload_lines(caplog) == [] and watch.warnings == 0


def test_a_falling_behind_uplink_is_one_warning_with_the_numbers(clock: Clock,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "wren.transport.overload")
    watch = OverloadWatch(lambda: 200, clock)
    feed(watch, clock, WINDOW_S + 1, late_every=10, lag_ms=1400.0)  # 10 % late, the worst 1.4 s
    [line] = overload_lines(caplog)
    assert line.levelname == "WARNING"
    text = line.getMessage()
    assert "falling behind real time" in text and f"over {LATE_MS:.0f} ms late" in text
    assert "the worst 1.40 s" in text and "200 devices connected" in text and "Capacity" in text
    assert "10.0 %" in text


def test_the_warning_repeats_at_most_once_a_minute_and_recovery_is_said_once(
        clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "wren.transport.overload")
    watch = OverloadWatch(lambda: 10, clock)
    feed(watch, clock, REPEAT_S - WINDOW_S, late_every=5)  # behind for most of a minute
    assert watch.warnings == 1
    feed(watch, clock, 2.5 * WINDOW_S, late_every=5)  # still behind, past the minute
    assert watch.warnings == 2
    feed(watch, clock, 3 * WINDOW_S)  # caught up
    levels = [r.levelname for r in overload_lines(caplog)]
    assert levels == ["WARNING", "WARNING", "INFO"]
    assert "back within 250 ms" in overload_lines(caplog)[-1].getMessage()


def test_the_server_metrics_sink_feeds_the_watch(clock: Clock) -> None:
    metrics = ServerMetrics()
    metrics.overload = OverloadWatch(lambda: len(metrics._open), clock)
    for _ in range(2 * int(WINDOW_S) * FRAMES_A_SECOND):
        clock.now += 1 / FRAMES_A_SECOND
        metrics.uplink_lag(900.0)
    assert metrics.overload.warnings == 1
