"""Which thread spent the server's CPU: `wren.transport.thread_cpu` (the `wren_thread_cpu_seconds` metric)."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from wren.transport.thread_cpu import OTHER, cpu_by_thread

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="read from Linux's /proc")


def test_a_busy_thread_is_counted_under_its_name_and_an_idle_one_is_not():
    spun, stop = threading.Event(), threading.Event()

    def spin_then_wait() -> None:
        while time.thread_time() < 0.2:
            pass
        spun.set()
        stop.wait()

    threads = [threading.Thread(target=spin_then_wait, name="test-busy"),
               threading.Thread(target=stop.wait, name="test-idle")]
    for thread in threads:
        thread.start()
    try:
        assert spun.wait(10)
        seconds = cpu_by_thread()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert seconds["test-busy"] >= 0.2
    assert seconds["test-idle"] < 0.05
    assert seconds[OTHER] >= 0.0


def test_the_named_threads_and_the_remainder_add_up_to_the_process():
    seconds = cpu_by_thread()
    total = time.process_time()
    assert "MainThread" in seconds
    assert sum(seconds.values()) == pytest.approx(total, abs=0.05)
