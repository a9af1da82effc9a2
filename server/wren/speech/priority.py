"""A lower OS priority for the threads that synthesise speech, so the event loop gets a core first.

One server process moves every device's audio on its event loop: each 60 ms frame of every stream is read,
decoded and voice-detected there (wren.pipeline.batched_executor). Speech synthesis runs beside it, on the
speak threads and on ONNX Runtime's own pool thread for piper. At equal priority the kernel shares the cores
among all runnable threads alike, so a burst of synthesis (several replies at once) takes a core from the
loop, and with 200 devices streaming their frames fall 150–380 ms behind (docs/performance.md, round 13).

Linux keeps a nice value per thread. A synthesis thread at nice 10 still runs on any core the loop does not
need, so a reply is not slower while the box has room, and it yields that core as soon as the loop wants it.
A thread may raise its own nice value without privilege but not lower it again, so a lowered thread stays
lowered. That is why piper's session is built on a thread lowered first: ONNX Runtime's pool threads take
the priority of the thread that creates them.

`idle` goes one step further (`[tts] idle_priority`, off by default): the thread also takes Linux's SCHED_IDLE
policy, so it runs only on a core no ordinary thread wants. With 200 streaming devices that kept the loop
waiting for a core 7-9 % of the time against 12-13 % at nice 10 (docs/performance.md, round 15), but it is
for a box that serves Wren alone: any other busy program at ordinary priority (a build, a backup) would hold
replies back for as long as it runs, where at nice 10 it only slows them. No way back without privilege.

Elsewhere `setpriority(PRIO_PROCESS, id)` names a process, not a thread, so these functions do nothing.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_NICE = 19


def per_thread_priority() -> bool:
    return sys.platform.startswith("linux")


def lower_this_thread(nice: int, idle: bool = False) -> bool:
    """Run the calling thread at `nice` from now on (never higher than it already runs), and with `idle` under
    SCHED_IDLE as well; True if it does."""
    if (nice <= 0 and not idle) or not per_thread_priority():
        return False
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(MAX_NICE, max(current, nice)))
        if idle:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
    except OSError as exc:  # e.g. a seccomp profile that forbids it: the work still runs, at equal priority
        log.warning("could not lower the priority of thread %s to nice %d%s: %s", tid, nice,
                    " (SCHED_IDLE)" if idle else "", exc)
        return False
    return True


def run_on_lowered_thread(fn: Callable[[], T], nice: int, name: str, idle: bool = False) -> T:
    """fn() on a new thread at `nice` (and `idle`), so the threads fn starts run so too; returns or raises as
    fn."""
    if (nice <= 0 and not idle) or not per_thread_priority():
        return fn()
    outcome: dict[str, object] = {}

    def run() -> None:
        lower_this_thread(nice, idle)
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # handed back to the caller's thread below
            outcome["error"] = exc

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
