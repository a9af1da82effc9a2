"""The threads that synthesise speech run at a lower OS priority, so the event loop that moves every
device's audio gets a core first (wren.speech.priority). Linux keeps a nice value per thread; elsewhere
nothing changes."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from wren.app import WrenServer
from wren.config import Config, ConfigError, load_config
from wren.speech.priority import lower_this_thread, per_thread_priority, run_on_lowered_thread
from wren.speech.tts.piper_engine import PiperEngine

pytestmark = pytest.mark.skipif(not per_thread_priority(), reason="per-thread nice values are Linux only")


def _nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def _own_nice() -> int:
    return _nice_of(threading.get_native_id())


def _on_a_new_thread(fn):
    box = {}
    thread = threading.Thread(target=lambda: box.update(value=fn()))
    thread.start()
    thread.join()
    return box["value"]


def _thread_nice_values() -> dict[int, int]:
    values = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except FileNotFoundError:  # a thread that ended meanwhile (an earlier test's pool winding down)
            continue
        values[int(tid)] = int(stat.rsplit(")", 1)[1].split()[16])  # field 19 of stat: nice
    return values


def test_a_lowered_thread_runs_at_the_asked_priority_and_no_other_thread_does():
    before = _own_nice()

    def lower_and_read():
        assert lower_this_thread(7)
        return _own_nice()

    assert _on_a_new_thread(lower_and_read) == max(before, 7)
    assert _own_nice() == before


def test_a_thread_already_lower_stays_as_low():
    def lower_twice():
        lower_this_thread(12)
        lower_this_thread(5)  # asking for a higher priority again does not raise it
        return _own_nice()

    assert _on_a_new_thread(lower_twice) == max(12, _own_nice())


def test_nice_zero_leaves_the_thread_alone():
    before = _own_nice()
    assert _on_a_new_thread(lambda: (lower_this_thread(0), _own_nice())) == (False, before)


def test_threads_started_from_a_lowered_thread_are_lowered_too():
    def start_a_child():
        return _on_a_new_thread(_own_nice)

    before = _own_nice()
    assert run_on_lowered_thread(start_a_child, 9, "probe") == max(9, before)
    assert _own_nice() == before  # the caller's thread is not lowered


def test_a_failure_on_the_lowered_thread_reaches_the_caller():
    def fail():
        raise ValueError("no voice")

    with pytest.raises(ValueError, match="no voice"):
        run_on_lowered_thread(fail, 10, "probe")


def test_pipers_own_threads_start_at_the_configured_priority():
    import piper  # noqa: F401  # importing it starts one idle thread of onnxruntime's, at any priority

    before = set(_thread_nice_values())
    engine = PiperEngine(threads=2, deterministic=True, nice=8)  # two intra-op threads: one pool thread
    started = {tid: nice for tid, nice in _thread_nice_values().items() if tid not in before}
    assert started, "ONNX Runtime started no thread of its own"
    assert set(started.values()) == {max(8, _own_nice())}
    assert b"".join(engine.synthesize("Hello."))  # and the voice still speaks


def test_the_servers_speak_workers_run_at_the_tts_nice_value():
    config = Config()
    config.tts.nice = 11
    server = WrenServer(config, speech=object(), agent=object())
    try:
        assert server.speak_executor.submit(_own_nice).result(10) == max(11, _own_nice())
    finally:
        server.speak_executor.shutdown()
        server.listen_executor.shutdown()


@pytest.mark.parametrize("value", ["-1", "20"])
def test_a_nice_value_outside_0_to_19_is_refused_by_name(value):
    with pytest.raises(ConfigError, match=r"tts\.nice"):
        load_config(env={"WREN_TTS_NICE": value})


def _policy_of(tid: int) -> int:
    return os.sched_getscheduler(tid)


def test_an_idle_thread_runs_under_sched_idle_and_the_caller_does_not():
    def lower_and_read():
        assert lower_this_thread(10, idle=True)
        return _policy_of(threading.get_native_id()), _own_nice()

    assert _on_a_new_thread(lower_and_read) == (os.SCHED_IDLE, max(10, _own_nice()))
    assert _policy_of(threading.get_native_id()) == os.SCHED_OTHER


def test_threads_started_from_an_idle_thread_are_idle_too():
    def start_a_child():
        return _on_a_new_thread(lambda: _policy_of(threading.get_native_id()))

    assert run_on_lowered_thread(start_a_child, 10, "probe", idle=True) == os.SCHED_IDLE
    assert run_on_lowered_thread(start_a_child, 10, "probe") == os.SCHED_OTHER


def test_the_speak_workers_run_under_sched_idle_only_when_asked():
    def policy_of_a_speak_worker(idle: bool) -> int:
        config = Config()
        config.tts.idle_priority = idle
        server = WrenServer(config, speech=object(), agent=object())
        try:
            return server.speak_executor.submit(lambda: _policy_of(threading.get_native_id())).result(10)
        finally:
            server.speak_executor.shutdown()
            server.listen_executor.shutdown()

    assert policy_of_a_speak_worker(True) == os.SCHED_IDLE
    assert policy_of_a_speak_worker(False) == os.SCHED_OTHER
    assert load_config(env={"WREN_TTS_IDLE_PRIORITY": "true"}).tts.idle_priority


def test_pipers_own_threads_run_under_sched_idle_with_idle_priority():
    import piper  # noqa: F401

    before = set(_thread_nice_values())
    engine = PiperEngine(threads=2, deterministic=True, nice=8, idle=True)
    started = [tid for tid in _thread_nice_values() if tid not in before]
    assert started, "ONNX Runtime started no thread of its own"
    assert {_policy_of(tid) for tid in started} == {os.SCHED_IDLE}
    assert b"".join(engine.synthesize("Hello."))
