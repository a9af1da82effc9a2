"""Timers heard on the device: a real server and a simulated xiaozhi device, which goes idle and is then
spoken to unprompted (`tts start`, `sentence_start`, audio, `tts stop`) when its timer is due: on time,
after a reply in progress, after the device was away, and after a server restart."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import ServerThread
from tests.server.helpers import assert_complete_reply, recognise, words
from tests.support.device import TestDevice
from tests.support.received import Reply
from tests.support.wren_process import wren_serve

SERVE_ENV = {"WREN_TTS_NATURAL_VARIATION": "0"}


def timer_status(dev: TestDevice) -> list[dict[str, Any]]:
    return [m for m in dev.json_messages() if m.get("type") == "wren_timers"]


async def set_timer(dev: TestDevice, said: str) -> Reply:
    await dev.detect(said)  # a typed query, answered like speech
    reply = await dev.next_reply(timeout=30)
    assert reply.stt == said and reply.text.startswith("Okay, a timer for"), reply.text
    return reply


def assert_unprompted(reply: Reply, text: str) -> None:
    assert reply.stt is None, "an announcement answers nobody"
    assert reply.text == text


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerThread]) -> ServerThread:
    # A short idle limit, so a socket kept open only by its pending timer is visible within seconds.
    return start_server(server={"idle_timeout_s": 1.0})


async def test_a_timer_keeps_the_idle_socket_open_and_goes_off_unprompted(server: ServerThread) -> None:
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        set_at = time.monotonic()
        confirmation = await set_timer(dev, "set a timer for 4 seconds")
        assert confirmation.text == "Okay, a timer for 4 seconds, starting now."
        # Idle from here on: without the timer the 1 s idle limit would close the socket long before 4 s.
        announcement = await dev.next_reply(timeout=10)
        assert_unprompted(announcement, "Your 4 second timer is done.")
        assert announcement.start_t - set_at >= 4.0 - 0.1
        assert_complete_reply(dev, announcement)
        code, reason = await dev.wait_closed(5)  # nothing pending any more: the idle limit applies again
        assert (code, reason) == (1000, "idle for 1 s")
        assert dev.closed.is_set() and time.monotonic() - announcement.stop_t < 3
    status = timer_status(dev)
    assert status[0]["pending"] == 1 and 0 < status[0]["next_s"] <= 4
    assert status[0]["session_id"] == dev.session_id
    assert status[-1] == {"type": "wren_timers", "session_id": dev.session_id, "pending": 0}


async def test_a_timer_due_mid_reply_is_spoken_right_after_it(server: ServerThread) -> None:
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        confirmation = await set_timer(dev, "set a timer for 1 second")  # due while this is still playing
        announcement = await dev.next_reply(timeout=10)
        assert_unprompted(announcement, "Your 1 second timer is done.")
        assert announcement.start_t >= confirmation.stop_t  # queued after the reply, never interleaved
        starts = [m for m in dev.json_messages() if m.get("type") == "tts" and m["state"] == "start"]
        assert len(starts) == 2


async def test_a_timer_due_while_the_device_was_away_is_spoken_after_its_next_hello(
    server: ServerThread,
) -> None:
    agent = server.server.agent  # type: ignore[union-attr]
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await set_timer(dev, "set a timer for 3 seconds")
        device_id = dev.device_id
    key = f"xiaozhi:{device_id}"
    await asyncio.sleep(3.5)  # it falls due with no socket to speak on: kept
    assert agent.timers.has_pending(key)
    async with TestDevice(server.ws_url, device_id=device_id, mcp=False) as dev:
        await dev.connect()
        announcement = await dev.next_reply(timeout=10)
        assert_unprompted(announcement, "Your 3 second timer is done.")
        assert_complete_reply(dev, announcement)
    assert not agent.timers.has_pending(key)


async def test_no_goodbye_after_empty_turns_while_a_timer_is_pending(
    start_server: Callable[..., ServerThread],
) -> None:
    # Three empty turns in a row normally end in a spoken goodbye and a close (the rule of three).
    quiet = start_server(server={"idle_timeout_s": 30.0}, vad={"no_speech_timeout_s": 0.4})
    async with TestDevice(quiet.ws_url, mcp=False) as dev:
        await dev.connect()
        await set_timer(dev, "set a timer for 8 seconds")
        since = len(dev.received)
        await dev.listen_start("auto")
        await dev.stream_silence(1800)  # four empty turns of 0.4 s
        assert not dev.closed.is_set()
        assert not [m for m in dev.json_messages(since) if m.get("type") == "tts"]  # no goodbye either
        announcement = await dev.next_reply(timeout=10)
        assert_unprompted(announcement, "Your 8 second timer is done.")


def test_the_ota_reply_gives_the_offset_of_the_configured_zone_now() -> None:
    from wren.config import Config
    from wren.transport.ota import timezone_offset_minutes

    config = Config()
    config.server.timezone_offset_minutes = 120
    assert timezone_offset_minutes(config) == 120
    config.server.timezone = "Asia/Kathmandu"  # no daylight saving: always +5:45
    assert timezone_offset_minutes(config) == 345


# ---- acceptance: `wren serve` as a user runs it --------------------------------------------------------

def ws_url(port: int) -> str:
    return f"ws://127.0.0.1:{port}/xiaozhi/v1/"


def delivered(data_dir: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(data_dir / "sessions.sqlite3") as db:
        return db.execute("SELECT kind, delivered FROM timers ORDER BY id").fetchall()


async def test_wren_serve_speaks_a_timer_to_an_idle_device(tmp_path: Path) -> None:
    with wren_serve(tmp_path, env=SERVE_ENV) as wren:
        async with TestDevice(ws_url(wren.port)) as dev:
            await dev.connect()
            await set_timer(dev, "set a timer for 2 seconds")
            announcement = await dev.next_reply(timeout=15)  # the device just sits there, idle
            assert_unprompted(announcement, "Your 2 second timer is done.")
            assert_complete_reply(dev, announcement)
            pcm, rate = dev.decode_reply(announcement)
            assert "timer" in words(recognise(pcm, rate))
    assert delivered(tmp_path) == [("timer", 1)]


async def test_a_timer_survives_a_server_restart_and_is_heard_when_the_device_connects(
    tmp_path: Path,
) -> None:
    device_id = "02:00:00:00:00:42"
    with wren_serve(tmp_path, env=SERVE_ENV) as first:
        async with TestDevice(ws_url(first.port), device_id=device_id, mcp=False) as dev:
            await dev.connect()
            await set_timer(dev, "set a timer for 5 seconds")
        # the device goes away and the server stops before the timer is due
    assert delivered(tmp_path) == [("timer", 0)]
    with wren_serve(tmp_path, env=SERVE_ENV) as second:
        async with TestDevice(ws_url(second.port), device_id=device_id, mcp=False) as dev:
            await dev.connect()
            announcement = await dev.next_reply(timeout=30)
            assert announcement.stt is None
            assert announcement.text.startswith("Your 5 second timer"), announcement.text  # "is done" or late
            assert_complete_reply(dev, announcement)
    assert delivered(tmp_path) == [("timer", 1)]  # spoken once: not again after another restart
