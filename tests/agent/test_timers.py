"""Timers, alarms and reminders through the real AgentLoop, builtin engine and SQLite store."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from wren.agent.loop import AgentLoop
from wren.agent.timers import MAX_PER_SESSION
from wren.config import ConfigError

from tests.agent.conftest import make_config

KEY = "xiaozhi:aa:bb:cc:dd:ee:01"
LONDON = ZoneInfo("Europe/London")


async def say(agent: AgentLoop, text: str, key: str = KEY) -> str:
    return (await agent.process_direct(text, session_key=key)).content


class Speaker:
    """A delivery callback standing in for the device sessions: records what each device was told."""

    def __init__(self, connected: bool = True) -> None:
        self.connected = connected
        self.spoken: list[tuple[str, str]] = []
        self.offered = 0
        self.heard = asyncio.Event()

    async def __call__(self, session_key: str, text: str) -> bool:
        self.offered += 1
        if not self.connected:
            return False
        self.spoken.append((session_key, text))
        self.heard.set()
        return True


def rows(data_dir: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(data_dir / "sessions.sqlite3") as db:
        return db.execute("SELECT session_key, kind, label, delivered FROM timers ORDER BY id").fetchall()


async def until(condition: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def frozen_clock(agent: AgentLoop, start: datetime) -> Callable[[float], None]:
    """Pin the agent's clock at `start`; the returned function moves it on by some seconds."""
    now = [start]
    agent.now = lambda: now[0]  # type: ignore[method-assign]

    def advance(seconds: float) -> None:
        now[0] += timedelta(seconds=seconds)
        agent.timers.set_delivery(agent.timers._delivery)  # wake the scheduler: the clock moved

    return advance


async def test_set_a_timer_confirms_in_words_and_is_stored_per_device(agent, tmp_path):
    assert await say(agent, "set a timer for five minutes") == "Okay, a timer for 5 minutes, starting now."
    assert await say(agent, "set a pasta timer for 8 minutes") == (
        "Okay, a pasta timer for 8 minutes, starting now."
    )
    assert rows(tmp_path / "data") == [(KEY, "timer", "", 0), (KEY, "timer", "pasta", 0)]
    assert agent.timers.has_pending(KEY) and not agent.timers.has_pending("xiaozhi:someone-else")
    other = "xiaozhi:someone-else"
    assert await say(agent, "how long is left", key=other) == "You don't have any timers set."


async def test_a_due_timer_is_spoken_on_its_device_with_its_words(agent):
    speaker = Speaker()
    agent.timers.set_delivery(speaker)
    assert await say(agent, "set a timer for 1 second") == "Okay, a timer for 1 second, starting now."
    await asyncio.wait_for(speaker.heard.wait(), 5)
    assert speaker.spoken == [(KEY, "Your 1 second timer is done.")]
    assert not agent.timers.has_pending(KEY)


async def test_how_long_is_left_and_cancel(agent):
    advance = frozen_clock(agent, datetime(2026, 3, 4, 15, 0, tzinfo=LONDON))
    await say(agent, "set a timer for 10 minutes")
    advance(4 * 60 + 48)
    assert await say(agent, "how much time is left on the timer") == (
        "Your 10 minute timer has 5 minutes and 12 seconds left."
    )
    await say(agent, "set a pasta timer for 8 minutes")
    assert await say(agent, "how long is left on the pasta timer") == "Your pasta timer has 8 minutes left."
    assert await say(agent, "how long is left") == (
        "You have 2 timers: the 10 minute timer has 5 minutes and 12 seconds left; and the pasta timer has "
        "8 minutes left."
    )
    assert await say(agent, "cancel the pasta timer") == "Okay, I cancelled the pasta timer."
    assert await say(agent, "stop the timer") == "Okay, I cancelled the 10 minute timer."
    assert await say(agent, "cancel the timer") == "You don't have any timers set."
    assert not agent.timers.has_pending(KEY)


async def test_several_timers_cancel_the_soonest_or_all(agent):
    for minutes in ("five", "ten", "twenty"):
        await say(agent, f"set a timer for {minutes} minutes")
    assert await say(agent, "cancel the timer") == (
        "Okay, I cancelled the 5 minute timer. You still have 2 other timers."
    )
    assert await say(agent, "cancel all timers") == "Okay, I cancelled all 2 timers."


async def test_alarms_wake_you_in_the_morning_and_say_the_time(agent):
    advance = frozen_clock(agent, datetime(2026, 3, 4, 22, 15, tzinfo=LONDON))
    speaker = Speaker()
    agent.timers.set_delivery(speaker)
    assert await say(agent, "wake me up at seven") == "Okay, I'll wake you up at 7 AM tomorrow."
    assert await say(agent, "set an alarm for 6:30 am") == "Okay, your alarm is set for 6:30 AM tomorrow."
    assert await say(agent, "when is my alarm") == (
        "You have 2 alarms: 6:30 AM tomorrow; and 7 AM tomorrow."
    )
    assert await say(agent, "what alarms do I have") == (
        "You have 2 alarms: 6:30 AM tomorrow; and 7 AM tomorrow."
    )
    advance(8 * 3600 + 15 * 60)  # 6:30
    await asyncio.wait_for(speaker.heard.wait(), 5)
    speaker.heard.clear()
    advance(30 * 60)  # 7:00
    await asyncio.wait_for(speaker.heard.wait(), 5)
    assert [text for _, text in speaker.spoken] == [
        "It's 6:30 AM. Time to wake up.", "It's 7 AM. Time to wake up."
    ]


async def test_reminders_at_a_time_and_after_a_duration(agent):
    advance = frozen_clock(agent, datetime(2026, 3, 4, 15, 7, tzinfo=LONDON))
    speaker = Speaker()
    agent.timers.set_delivery(speaker)
    assert await say(agent, "remind me at six to call mum") == "I'll remind you at 6 PM to call mum."
    assert await say(agent, "remind me in ten minutes to check the oven") == (
        "I'll remind you in 10 minutes to check the oven."
    )
    assert await say(agent, "remind me to call my sister at 9 am") == (
        "I'll remind you at 9 AM tomorrow to call your sister."
    )
    assert (await say(agent, "remind me to buy milk")).startswith("When should I remind you?")
    advance(10 * 60)
    await asyncio.wait_for(speaker.heard.wait(), 5)
    speaker.heard.clear()
    advance(3 * 3600)
    await asyncio.wait_for(speaker.heard.wait(), 5)
    assert [text for _, text in speaker.spoken] == ["Reminder: check the oven.", "Reminder: call mum."]


async def test_a_past_time_today_means_tomorrow(agent):
    frozen_clock(agent, datetime(2026, 3, 4, 19, 30, tzinfo=LONDON))
    assert await say(agent, "remind me at 7 pm to lock up") == "I'll remind you at 7 PM tomorrow to lock up."
    (timer,) = agent.timers.pending(KEY)
    assert datetime.fromtimestamp(timer.due_at, LONDON) == datetime(2026, 3, 5, 19, 0, tzinfo=LONDON)


async def test_an_announcement_nobody_heard_is_kept_and_spoken_when_the_device_says_hello(agent, tmp_path):
    speaker = Speaker(connected=False)
    agent.timers.set_delivery(speaker)
    await say(agent, "set a timer for 1 second")
    await asyncio.sleep(1.3)
    assert speaker.offered >= 1 and not speaker.spoken
    assert agent.timers.has_pending(KEY)  # the session keeps the socket open for it
    assert rows(tmp_path / "data")[-1][-1] == 0  # not delivered
    speaker.connected = True
    agent.timers.device_connected(KEY)  # the device's hello: spoken now, not at the next retry
    await asyncio.wait_for(speaker.heard.wait(), 2)
    assert speaker.spoken == [(KEY, "Your 1 second timer is done.")]
    await until(lambda: rows(tmp_path / "data")[-1][-1] == 1)  # marked delivered


async def test_pending_timers_survive_a_restart_and_one_due_while_down_fires_at_start(
    agent_factory, tmp_path
):
    data = tmp_path / "data"
    first = await agent_factory(data)
    await say(first, "set a timer for 1 second")
    await say(first, "remind me in an hour to stretch")
    await first.close()  # the server goes down before the timer is due
    await asyncio.sleep(1.2)

    second = await agent_factory(data)
    assert [t.kind for t in second.timers.pending(KEY)] == ["timer", "reminder"]
    speaker = Speaker()
    second.timers.set_delivery(speaker)  # what WrenServer does once its sessions can be reached
    await asyncio.wait_for(speaker.heard.wait(), 2)
    assert speaker.spoken == [(KEY, "Your 1 second timer is done.")]
    assert [t.kind for t in second.timers.pending(KEY)] == ["reminder"]
    await until(lambda: rows(data) == [(KEY, "timer", "", 1), (KEY, "reminder", "stretch", 0)])


async def test_a_late_timer_says_when_it_finished(agent):
    advance = frozen_clock(agent, datetime(2026, 3, 4, 15, 0, tzinfo=LONDON))
    speaker = Speaker(connected=False)
    agent.timers.set_delivery(speaker)
    await say(agent, "set a timer for 5 minutes")
    advance(20 * 60)  # the device was away when it went off
    speaker.connected = True
    agent.timers.device_connected(KEY)
    await asyncio.wait_for(speaker.heard.wait(), 2)
    assert speaker.spoken == [(KEY, "Your 5 minute timer finished at 3:05 PM.")]


async def test_the_number_of_pending_timers_per_device_is_bounded(agent):
    for _ in range(MAX_PER_SESSION):
        await say(agent, "set a timer for 10 minutes")
    assert await say(agent, "set a timer for 10 minutes") == (
        f"You already have {MAX_PER_SESSION} timers, alarms and reminders. Cancel one first."
    )
    assert len(agent.timers.pending(KEY)) == MAX_PER_SESSION


async def test_other_requests_are_not_taken_for_timers(agent):
    assert (await say(agent, "what time is it")).startswith("It's")
    assert (await say(agent, "hello")).startswith("Hello")
    assert "timer" not in await say(agent, "how long does it take to get to london on the train")
    assert not agent.timers.has_pending(KEY)


async def test_the_agent_clock_uses_the_iana_timezone_over_the_offset(tmp_path):
    config = make_config(tmp_path / "data")
    config.server.timezone = "Asia/Kolkata"
    config.server.timezone_offset_minutes = -300
    agent = AgentLoop.from_config(config)
    assert agent.now().utcoffset() == timedelta(hours=5, minutes=30)
    config.server.timezone = "Nowhere/Special"
    with pytest.raises(ConfigError, match=r"server\.timezone"):
        AgentLoop.from_config(config)


async def test_a_cancel_the_recogniser_wrote_in_the_past_tense_still_cancels(agent):
    await say(agent, "set a timer for five minutes")
    assert "cancelled" in (await say(agent, "Cancelled the timer.")).lower()
    await say(agent, "set a timer for five minutes")
    assert "cancelled" in (await say(agent, "Stopped the timer.")).lower()
