"""The playback pacer on a virtual clock: pre-buffer, one frame per frame time, re-anchoring."""

from __future__ import annotations

import itertools

import pytest
from wren.pipeline.pacer import PlaybackPacer

from tests.support.clock import FakeClock


async def _send(pacer: PlaybackPacer, clock: FakeClock, count: int) -> list[float]:
    times = []
    for _ in range(count):
        await pacer.wait_for_slot()
        times.append(clock.now)
        pacer.frame_sent()
    return times


async def test_prebuffer_goes_at_once_then_one_frame_per_frame_time():
    clock = FakeClock()
    pacer = PlaybackPacer(60, 5, clock=clock, sleep=clock.sleep)
    times = await _send(pacer, clock, 20)
    assert times[:6] == pytest.approx([100.0] * 6)  # the pre-buffer (5) plus the frame playing now
    gaps = [round(b - a, 6) for a, b in itertools.pairwise(times[5:])]
    assert gaps == [0.06] * 14
    lead = [(100.0 + i * 0.06) - t for i, t in enumerate(times)]
    assert max(lead) <= 0.3 + 1e-9


async def test_clock_reanchors_after_the_queue_ran_dry():
    clock = FakeClock()
    pacer = PlaybackPacer(60, 5, clock=clock, sleep=clock.sleep)
    await _send(pacer, clock, 10)
    clock.now += 5.0  # waiting on a tool call: the device played everything and went quiet
    times = await _send(pacer, clock, 8)
    assert pacer.reanchors == 1
    assert times[:6] == pytest.approx([times[0]] * 6)  # fresh pre-buffer, no burst
    assert round(times[6] - times[5], 6) == 0.06


async def test_prebuffer_is_capped_below_one_second_ahead():
    clock = FakeClock()
    pacer = PlaybackPacer(60, 100, clock=clock, sleep=clock.sleep)
    times = await _send(pacer, clock, 40)
    lead = [(100.0 + i * 0.06) - t for i, t in enumerate(times)]
    assert max(lead) < 1.0


async def test_drain_waits_until_the_last_frame_has_played_plus_margin():
    clock = FakeClock()
    pacer = PlaybackPacer(60, 5, clock=clock, sleep=clock.sleep)
    await _send(pacer, clock, 10)  # plays from 100.0 to 100.6
    await pacer.wait_drained(120)
    assert abs(clock.now - 100.72) < 1e-9
