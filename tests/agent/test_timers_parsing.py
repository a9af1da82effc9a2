"""Durations and times of day as people say them (wren.agent.timeparse): words and digits alike."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from wren.agent.timeparse import (
    duration_adjective,
    find_duration,
    find_time_of_day,
    local_timezone,
    next_occurrence,
    normalise,
    speak_clock,
    speak_duration,
    speak_when,
)

LONDON = ZoneInfo("Europe/London")
AFTERNOON = datetime(2026, 3, 4, 15, 7, tzinfo=LONDON)  # a Wednesday


def duration_of(text: str) -> float | None:
    found = find_duration(normalise(text))
    return None if found is None else found.seconds


@pytest.mark.parametrize(("said", "seconds"), [
    ("set a timer for five minutes", 300),
    ("set a timer for 5 minutes", 300),
    ("a 10 minute timer", 600),
    ("a ten-minute timer", 600),
    ("set a timer for one hour and thirty minutes", 5400),
    ("set a timer for 1 hour 30 minutes", 5400),
    ("timer for 90 seconds", 90),
    ("timer for ninety seconds", 90),
    ("set a timer for twenty five minutes", 1500),
    ("an hour and a half", 5400),
    ("one and a half hours", 5400),
    ("1.5 hours", 5400),
    ("half an hour", 1800),
    ("a quarter of an hour", 900),
    ("a couple of minutes", 120),
    ("in a minute", 60),
    ("a hundred and twenty seconds", 120),
    ("2 hours, 30 minutes and 10 seconds", 9010),
    ("5min", 300),
    ("Set a timer for 2 seconds.", 2),
])
def test_durations_in_words_and_digits(said: str, seconds: float) -> None:
    assert duration_of(said) == seconds


def test_a_second_timer_is_an_ordinal_not_one_second() -> None:
    assert duration_of("set a second timer for 5 minutes") == 300
    assert duration_of("set a second timer") is None


def test_no_duration_in_a_sentence_without_one() -> None:
    assert duration_of("set a timer") is None
    assert duration_of("remind me at six to call mum") is None


def test_duration_span_includes_its_lead_in_word() -> None:
    text = normalise("remind me in ten minutes to check the oven")
    found = find_duration(text)
    assert found is not None and text[found.start:found.end] == "in 10 minutes"


def clock_of(text: str) -> tuple[int, int, str | None] | None:
    found = find_time_of_day(normalise(text))
    return None if found is None else (found.hour, found.minute, found.meridiem)


@pytest.mark.parametrize(("said", "clock"), [
    ("wake me up at seven", (7, 0, None)),
    ("wake me up at 7", (7, 0, None)),
    ("set an alarm for 6:30 am", (6, 30, "am")),
    ("set an alarm for six thirty a.m.", (6, 30, "am")),
    ("alarm at 7 p.m.", (19, 0, "pm")),
    ("alarm at 7pm", (19, 0, "pm")),
    ("at six oh five am", (6, 5, "am")),
    ("at half past six", (6, 30, None)),
    ("at quarter to seven", (6, 45, None)),
    ("at ten past 8 pm", (20, 10, "pm")),
    ("at noon", (12, 0, "pm")),
    ("at midnight", (0, 0, "am")),
    ("at 18:30", (18, 30, None)),
    ("at seven o'clock", (7, 0, None)),
    ("remind me to call mum at 6 tonight", (18, 0, "pm")),
    ("alarm for 7 in the morning", (7, 0, "am")),
    ("set an alarm for 605 am", (6, 5, "am")),  # "six oh five" normalised upstream as one digit string
    ("remind me at 605 to call", (6, 5, None)),
])
def test_times_of_day_in_words_and_digits(said: str, clock: tuple[int, int, str | None]) -> None:
    assert clock_of(said) == clock


def test_a_duration_is_not_read_as_a_clock_time() -> None:
    assert clock_of("remind me in 10 minutes") is None
    assert clock_of("set a timer for 5 minutes") is None


def due(text: str, now: datetime = AFTERNOON, morning: bool = False) -> datetime:
    found = find_time_of_day(normalise(text))
    assert found is not None, text
    return next_occurrence(found, now, morning=morning)


def test_a_time_already_past_today_means_tomorrow() -> None:
    assert due("at 9 am") == datetime(2026, 3, 5, 9, 0, tzinfo=LONDON)
    assert due("at 3:06 pm") == datetime(2026, 3, 5, 15, 6, tzinfo=LONDON)
    assert due("at 3:08 pm") == datetime(2026, 3, 4, 15, 8, tzinfo=LONDON)


def test_an_hour_without_am_or_pm_is_the_next_one() -> None:
    assert due("at six") == datetime(2026, 3, 4, 18, 0, tzinfo=LONDON)  # 6 PM today, not 6 AM tomorrow
    late = datetime(2026, 3, 4, 19, 30, tzinfo=LONDON)
    assert due("at six", late) == datetime(2026, 3, 5, 6, 0, tzinfo=LONDON)


def test_wake_up_times_without_am_or_pm_are_mornings() -> None:
    assert due("at seven", morning=True) == datetime(2026, 3, 5, 7, 0, tzinfo=LONDON)
    assert due("at 7 pm", morning=True) == datetime(2026, 3, 4, 19, 0, tzinfo=LONDON)


def test_tomorrow_is_tomorrow_even_when_today_is_still_to_come() -> None:
    assert due("tomorrow at 6 pm") == datetime(2026, 3, 5, 18, 0, tzinfo=LONDON)
    assert due("at seven tomorrow") == datetime(2026, 3, 5, 7, 0, tzinfo=LONDON)


def test_tomorrow_keeps_the_wall_clock_time_across_a_daylight_saving_change() -> None:
    before_change = datetime(2026, 3, 28, 22, 0, tzinfo=LONDON)  # clocks go forward on the 29th
    alarm = due("at 7 am", before_change)
    assert (alarm.hour, alarm.day) == (7, 29)
    assert alarm.utcoffset() == timedelta(hours=1)


def test_already_normalised_text_is_understood_the_same() -> None:
    assert normalise("set a timer for 5 minutes") == "set a timer for 5 minutes"
    assert normalise("Remind me at 6:30 PM, to call Mum!") == "remind me at 6:30 pm to call mum"
    assert normalise("six thirty") == "6 30" and normalise("thirty six") == "36"


def test_spoken_forms() -> None:
    assert speak_duration(300) == "5 minutes"
    assert speak_duration(60) == "1 minute"
    assert speak_duration(5400) == "1 hour and 30 minutes"
    assert speak_duration(90) == "90 seconds"
    assert speak_duration(330) == "5 minutes and 30 seconds"
    assert duration_adjective(300) == "5 minute" and duration_adjective(2) == "2 second"
    assert speak_clock(datetime(2026, 3, 4, 18, 0)) == "6 PM"
    assert speak_clock(datetime(2026, 3, 4, 6, 30)) == "6:30 AM"
    assert speak_clock(datetime(2026, 3, 4, 0, 0)) == "12 AM"
    assert speak_when(datetime(2026, 3, 5, 7, 0, tzinfo=LONDON), AFTERNOON) == "7 AM tomorrow"


def test_timezone_name_wins_over_the_offset() -> None:
    assert local_timezone("", 90) == timezone(timedelta(minutes=90))
    zone = local_timezone("America/New_York", 90)
    assert datetime(2026, 7, 1, 12, tzinfo=zone).utcoffset() == timedelta(hours=-4)  # summer time
    assert datetime(2026, 1, 1, 12, tzinfo=zone).utcoffset() == timedelta(hours=-5)


def test_an_unknown_timezone_name_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match="Mars/Olympus"):
        local_timezone("Mars/Olympus")
