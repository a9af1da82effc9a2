"""CPU seconds of each of the server's threads, by the name Python gave it (Linux; nothing elsewhere).

Why: one process runs the event loop (every device's audio), the recogniser's decode threads and the
synthesis threads side by side, and when the uplink falls behind the first question is which of them had
the cores. `process_cpu_seconds_total` only gives the sum. Read at scrape time from `/proc/self/task`
(the kernel's per-thread accounting: no sampling, no cost while nobody asks); a thread that ended between
the listing and the read is simply left out.

What Python did not start (ONNX Runtime's own pool threads, e.g. piper's) and what threads that have ended
used is one remainder, `OTHER`: the process's CPU time minus that of the live named threads.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

OTHER = "(other)"
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def thread_cpu_seconds(native_id: int) -> float | None:
    """The thread's CPU seconds so far (schedstat's nanoseconds, else stat's clock ticks); None if gone."""
    task = Path(f"/proc/self/task/{native_id}")
    try:
        return int((task / "schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:  # a kernel without schedstats: utime + stime, after the command name (which may hold spaces)
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S
    except (OSError, ValueError, IndexError):
        return None


def cpu_by_thread() -> dict[str, float]:
    """Thread name → CPU seconds (threads of one name summed), plus `OTHER`; {} where /proc has no tasks."""
    if not sys.platform.startswith("linux"):
        return {}
    seconds: dict[str, float] = {}
    for thread in threading.enumerate():
        spent = thread_cpu_seconds(thread.native_id) if thread.native_id is not None else None
        if spent is not None:
            seconds[thread.name] = seconds.get(thread.name, 0.0) + spent
    if not seconds:
        return {}
    # Read after the threads, so the remainder is never short of what they used meanwhile.
    seconds[OTHER] = max(0.0, time.process_time() - sum(seconds.values()))
    return seconds
