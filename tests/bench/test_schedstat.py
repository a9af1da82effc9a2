"""`thread_schedstat`: a thread's time on a core and waiting for one, which the concurrency bench reports for
the server's event loop (so a lag tail can be told apart: the box full, or the loop too slow)."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from tools.bench.common import box_steal, loop_speed_probe, stolen_pct, thread_schedstat

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux's /proc schedstat")


def test_a_busy_thread_gains_time_on_a_core() -> None:
    before = thread_schedstat(os.getpid(), threading.get_native_id())
    assert before is not None
    end = time.thread_time() + 0.05
    while time.thread_time() < end:  # 50 ms of CPU on this thread
        pass
    after = thread_schedstat(os.getpid(), threading.get_native_id())
    assert after is not None
    assert after[0] - before[0] >= 0.04
    assert after[1] >= before[1] >= 0.0


def test_no_such_process_gives_none() -> None:
    assert thread_schedstat(2**22 + 12345) is None


def test_the_box_s_stolen_time_is_a_share_of_all_its_ticks() -> None:
    """`box_steal`: what the hypervisor gave to other machines, reported beside the loop's own numbers."""
    first = box_steal()
    assert first is not None and 0 <= first[0] <= first[1]
    end = time.monotonic() + 0.05
    while time.monotonic() < end:  # let the box's tick counters move
        pass
    second = box_steal()
    assert second is not None and second[1] > first[1]
    stolen = stolen_pct(first, second)
    assert stolen is not None and 0.0 <= stolen <= 100.0
    assert stolen_pct((10.0, 1000.0), (35.0, 1100.0)) == 25.0
    assert stolen_pct(None, second) is None and stolen_pct(second, second) is None


def test_the_speed_probe_times_its_own_cpu_in_ms_per_million_steps() -> None:
    """`loop_speed_probe`: the box's speed each second of a run, on `box_speed`'s scale (a 1M-step loop)."""
    speeds = [loop_speed_probe(steps=50_000) for _ in range(3)]
    assert all(1.0 < ms < 2000.0 for ms in speeds)  # any box from 50× faster to 50× slower than ours
