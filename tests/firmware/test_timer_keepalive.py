"""The Wren firmware and server-held timers (docs/protocol.md, Wren extensions), under the real MicroPython
unix port against scripted servers: an idle device plays an unprompted `tts start` .. `tts stop`, keeps its
channel while the server says a timer is pending (longer than its inactivity limit), and reopens a channel
lost meanwhile so the timer still rings."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from tests.firmware.conftest import MpyProcess
from tests.firmware.test_state_machine import device, played, transitions
from tests.firmware.xiaozhi_script import SESSION, Conn, pcm_frame, serving

ANNOUNCEMENT_FRAMES = 5


def timers(pending: int, next_s: int | None = None) -> dict:
    msg = {"type": "wren_timers", "session_id": SESSION, "pending": pending}
    if next_s is not None:
        msg["next_s"] = next_s
    return msg


async def announce(c: Conn) -> None:
    """What a Wren server sends when a timer goes off: speech nobody asked for, then the new count."""
    await c.tts("start")
    await c.tts("sentence_start", text="Your 3 second timer is done.")
    await c.speak([pcm_frame(2500)] * ANNOUNCEMENT_FRAMES)
    await c.tts("stop")
    await c.send(timers(0))


def line_index(mp: MpyProcess, text: str) -> int:
    return next(i for i, line in enumerate(mp.lines) if text in line)


async def test_an_idle_device_keeps_its_channel_for_a_pending_timer_and_plays_it_unprompted(
    device_dir: Path,
) -> None:
    announced = asyncio.Event()

    async def handler(ws) -> None:
        c = Conn(ws)
        await c.hello()
        await c.next_json(type="listen", state="stop")  # push-to-talk: "set a timer for 3 seconds"
        await c.tts("start")
        await c.speak([pcm_frame(1000)] * 3)
        await c.tts("stop")  # the device goes idle
        await c.send(timers(1, 3))
        await asyncio.sleep(3.5)  # silence for longer than the device's 2 s inactivity limit
        await announce(c)
        announced.set()
        await c.drain()

    # channel_timeout_s stands in for the 120 s of reference §8.3.
    async with (
        serving(handler) as port,
        device(device_dir, port, "press@0.3,release@0.9", turns=0, listen_mode="manual", channel_timeout_s=2,
               volume=100) as mp,
    ):
        await mp.until(announced)
        # Once nothing is pending, the inactivity rule is back.
        await mp.wait_for("no data for 2 s: treated as closed", timeout=10)
    assert mp.count("no data for") == 1
    assert line_index(mp, "timers: 0 pending") < line_index(mp, "no data for 2 s")
    assert "timers: 1 pending on the server" in mp.output()
    assert transitions(mp) == ["idle -> connecting", "connecting -> listening", "listening -> idle",
                               "idle -> speaking", "speaking -> idle", "idle -> speaking", "speaking -> idle"]
    assert "sentence_start Your 3 second timer is done." in mp.output()
    assert np.count_nonzero(played(device_dir) == 2500) == ANNOUNCEMENT_FRAMES * 960  # heard in full


async def test_a_channel_lost_while_a_timer_is_pending_is_reopened_and_the_timer_still_rings(
    device_dir: Path,
) -> None:
    hellos = 0
    rang = asyncio.Event()
    second: dict[str, list] = {}

    async def handler(ws) -> None:
        nonlocal hellos
        c = Conn(ws)
        await c.hello()
        hellos += 1
        if hellos == 1:
            await c.next_json(type="listen", state="start")
            await c.send(timers(1, 5))
            await asyncio.sleep(0.3)
            await ws.close(1001, "server shutting down")  # the server restarts before the timer is due
            return
        # The device came back by itself: a hello, and no listen (nobody pressed anything).
        await asyncio.sleep(0.3)
        second["before"] = list(c.messages)
        await c.send(timers(1, 0))
        await announce(c)
        await c.next_json(type="listen", state="start")  # auto mode: listening again after the speech
        rang.set()
        await c.drain()

    async with (
        serving(handler) as port,
        device(device_dir, port, "press@0.3", turns=0, volume=100) as mp,
    ):
        await mp.until(rang)
    assert hellos == 2
    assert [m["type"] for m in second["before"]] == ["hello"]
    assert "channel lost with 1 pending: reopening" in mp.output()
    assert transitions(mp) == ["idle -> connecting", "connecting -> listening", "listening -> idle",
                               "idle -> connecting", "connecting -> idle", "idle -> speaking",
                               "speaking -> listening"]
    assert np.count_nonzero(played(device_dir) == 2500) == ANNOUNCEMENT_FRAMES * 960
