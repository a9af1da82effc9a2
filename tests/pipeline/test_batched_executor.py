"""The uplink's executor: jobs run on its threads, results come back to the loop in batches."""

from __future__ import annotations

import asyncio
import threading

import pytest
from wren.pipeline import batched_executor
from wren.pipeline.batched_executor import BatchedExecutor


@pytest.fixture
def executor():
    pool = BatchedExecutor(2, "test-batched")
    yield pool
    pool.shutdown(wait=True)


async def test_results_and_exceptions_reach_the_awaiting_task(executor):
    assert await executor.submit(lambda a, b: a + b, 2, 3) == 5

    def fail() -> None:
        raise ValueError("corrupt packet")

    with pytest.raises(ValueError, match="corrupt packet"):
        await executor.submit(fail)
    assert (await executor.submit(lambda: threading.current_thread().name)).startswith("test-batched_")


async def _busy_workers(executor: BatchedExecutor, hold: threading.Event) -> list:
    """Occupy every worker with a job that waits for `hold`; returns once each has really started."""
    blockers = []
    for _ in range(executor.workers):
        started = threading.Event()
        blockers.append(executor.submit(lambda started=started: (started.set(), hold.wait(5))))
        assert await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
    return blockers


async def test_results_waiting_together_come_back_in_few_loop_wake_ups(executor, monkeypatch):
    wake_ups = []
    resolve = batched_executor._resolve
    monkeypatch.setattr(batched_executor, "_resolve", lambda results: (wake_ups.append(len(results)),
                                                                          resolve(results)))
    hold = threading.Event()
    blockers = await _busy_workers(executor, hold)
    wake_ups.clear()
    jobs = [executor.submit(lambda i=i: i * i) for i in range(100)]
    assert executor.waiting == 100
    hold.set()
    assert await asyncio.gather(*jobs) == [i * i for i in range(100)]
    await asyncio.gather(*blockers)
    assert sum(wake_ups) == 102
    assert len(wake_ups) <= 20  # 100 jobs waiting together: batched, not 100 wake-ups


async def test_items_of_one_together_function_waiting_at_once_run_in_one_call(executor):
    calls: list[list[int]] = []

    def squares(items: list[int]) -> list[object]:
        calls.append(list(items))
        return [ValueError(f"odd {i}") if i == 7 else i * i for i in items]

    hold = threading.Event()
    blockers = await _busy_workers(executor, hold)
    plain = executor.submit(lambda: "plain")
    jobs = [executor.submit_together(squares, i) for i in range(10)]
    hold.set()
    outcomes = await asyncio.gather(*jobs, return_exceptions=True)
    assert outcomes[:7] == [i * i for i in range(7)] and outcomes[8:] == [64, 81]
    assert isinstance(outcomes[7], ValueError)  # only that item failed
    assert await plain == "plain"
    await asyncio.gather(*blockers)
    assert sorted(i for call in calls for i in call) == list(range(10))
    assert len(calls) <= 2  # both workers may take a share, never one call per item


async def test_a_together_call_that_raises_fails_each_of_its_items(executor):
    def broken(items: list[int]) -> list[int]:
        raise RuntimeError("model failed")

    with pytest.raises(RuntimeError, match="model failed"):
        await executor.submit_together(broken, 1)
    assert await executor.submit(lambda: 2) == 2  # the worker goes on


async def test_a_job_that_may_block_hands_over_the_finished_results_first(executor, monkeypatch):
    """A recogniser's finish can wait for a decode: frames finished before it must not wait behind it."""
    hold, finish_started, release_finish = threading.Event(), threading.Event(), threading.Event()
    blockers = await _busy_workers(executor, hold)
    quick = [executor.submit(lambda i=i: i) for i in range(5)]

    def finish() -> str:
        finish_started.set()
        release_finish.wait(5)
        return "words"

    slow = executor.submit(finish, may_block=True)
    hold.set()
    await asyncio.get_running_loop().run_in_executor(None, finish_started.wait, 5)
    assert await asyncio.wait_for(asyncio.gather(*quick), 5) == list(range(5))  # while finish still runs
    assert not slow.done()
    release_finish.set()
    assert await slow == "words"
    await asyncio.gather(*blockers)


async def test_both_workers_run_jobs_at_the_same_time(executor):
    both = threading.Barrier(2, timeout=5)  # passes only if two jobs are inside it at once
    assert sorted(await asyncio.gather(executor.submit(both.wait), executor.submit(both.wait))) == [0, 1]


async def test_a_job_whose_task_was_cancelled_still_runs_to_its_end(executor):
    started, finish, finished = threading.Event(), threading.Event(), threading.Event()

    def job() -> str:
        started.set()
        finish.wait(5)
        finished.set()
        return "done"

    future = executor.submit(job)
    waiter = asyncio.ensure_future(asyncio.shield(future))
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
    waiter.cancel()
    finish.set()
    assert await future == "done"  # what a session waits for before releasing the uplink
    assert finished.is_set()


async def test_shutdown_cancels_jobs_not_started_and_refuses_new_ones():
    pool = BatchedExecutor(1, "test-batched")
    hold = threading.Event()
    (running,) = await _busy_workers(pool, hold)
    queued = pool.submit(lambda: "never")
    pool.shutdown()
    hold.set()
    assert await running == (None, True)
    with pytest.raises(asyncio.CancelledError):
        await queued
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(lambda: None)
    pool.shutdown(wait=True)


# ---- on the loop (`on_loop`: the server's mode when the recogniser's feed never blocks) -----------------


@pytest.fixture
def on_loop():
    pool = BatchedExecutor(1, "test-on-loop", on_loop=True)
    yield pool
    pool.shutdown(wait=True)


async def test_on_the_loop_jobs_run_on_the_loop_thread_and_blocking_ones_on_a_worker(on_loop):
    assert await on_loop.submit(threading.current_thread) is threading.current_thread()
    assert await on_loop.submit_together(lambda items: [threading.current_thread()] * len(items), 1) \
        is threading.current_thread()
    worker = await on_loop.submit(lambda: threading.current_thread().name, may_block=True)
    assert worker.startswith("test-on-loop_")


async def test_on_the_loop_the_items_submitted_in_one_round_run_in_one_call(on_loop):
    calls: list[list[int]] = []

    def squares(items: list[int]) -> list[object]:
        calls.append(list(items))
        return [ValueError(f"odd {i}") if i == 7 else i * i for i in items]

    plain = on_loop.submit(lambda: "plain")
    jobs = [on_loop.submit_together(squares, i) for i in range(10)]
    assert on_loop.waiting == 11  # nothing ran yet: the round comes after this task yields
    outcomes = await asyncio.gather(*jobs, return_exceptions=True)
    assert outcomes[:7] == [i * i for i in range(7)] and outcomes[8:] == [64, 81]
    assert isinstance(outcomes[7], ValueError)  # only that item failed
    assert await plain == "plain"
    assert calls == [list(range(10))]


async def test_on_the_loop_a_round_runs_at_most_max_together_items_and_leaves_the_rest_for_the_next(on_loop):
    calls: list[list[int]] = []
    rounds_seen: list[int] = []

    def record(items: list[int]) -> list[int]:
        calls.append(list(items))
        return items

    async def count_rounds() -> None:  # a task that runs once per loop round
        for _ in range(5):
            rounds_seen.append(len(calls))
            await asyncio.sleep(0)

    n = batched_executor.MAX_TOGETHER + 5
    ticker = asyncio.ensure_future(count_rounds())
    assert await asyncio.gather(*(on_loop.submit_together(record, i) for i in range(n))) == list(range(n))
    await ticker
    assert [len(c) for c in calls] == [batched_executor.MAX_TOGETHER, 5]
    assert sorted(i for c in calls for i in c) == list(range(n))
    assert 1 in rounds_seen  # the loop served another task between the two calls


async def test_on_the_loop_a_together_call_that_raises_fails_each_of_its_items(on_loop):
    def broken(items: list[int]) -> list[int]:
        raise RuntimeError("model failed")

    results = await asyncio.gather(on_loop.submit_together(broken, 1), on_loop.submit_together(broken, 2),
                                   return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert await on_loop.submit(lambda: 2) == 2  # the next round goes on


async def test_on_the_loop_shutdown_cancels_jobs_not_started_and_refuses_new_ones():
    pool = BatchedExecutor(1, "test-on-loop", on_loop=True)
    queued = pool.submit(lambda: "never")
    pool.shutdown(wait=True)
    with pytest.raises(asyncio.CancelledError):
        await queued
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(lambda: None)
