"""Durations and times of day in spoken English, for timers, alarms and reminders.

Input may be raw recogniser words ("set a timer for one hour and thirty minutes"), typed text
("Alarm at 6:30 a.m.!") or text already normalised upstream (spelled numbers turned into digits):
`normalise()` brings all of them to one form (lower case, digits, `am`/`pm`, no punctuation
but the colon in `6:30`), and the finders work on that form only. Every finder returns the span it
matched, so a caller can cut the time phrase out of a sentence ("remind me at 6 to call mum").

Times of day are local (the server's zone, `[server] timezone`); a time already past today means
tomorrow, and an hour without am/pm means whichever of the two comes first (or the morning one for
wake-up alarms).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from wren.agent.nlu.numbers import spoken_numbers_to_digits

_UNIT_SECONDS = {"hour": 3600, "hr": 3600, "minute": 60, "min": 60, "second": 1, "sec": 1}
_UNIT = r"(?P<unit>hours?|hrs?|minutes?|mins?|seconds?|secs?)\b"
# One duration component: "5 minutes", "an hour", "2 and a half hours", "an hour and a half", "half an
# hour", "a quarter of an hour". "a second" followed by timer/alarm/one is an ordinal, not a duration.
_COMPONENT = re.compile(
    r"\b(?:"
    r"(?P<half>half)\s+(?:an?|1)\s+(?P<hunit>hour|minute)"
    r"|(?:(?P<q>\d+)\s+)?(?:a\s+)?quarters?\s+(?:of\s+)?(?:an?\s+)?hour"
    r"|(?:(?P<n>\d+(?:\.\d+)?)(?P<and_half>\s+and\s+a\s+half)?|(?P<a>an?))\s*" + _UNIT +
    r"(?P<half_after>\s+and\s+a\s+half)?"
    r")"
)
_ORDINAL_AFTER = re.compile(r"\s+(?:timer|alarm|reminder|one)\b")
_JOINER = re.compile(r"\s*(?:,\s*)?(?:and\s+)?")
_LEAD_IN = re.compile(r"(?:\b(?:in|for|after|at|by|until|till)\s+)$")

_MERIDIEM = r"(?:\s*(?P<mer>am|pm)\b)?"
# Bare numbers are clock times only right after a preposition ("at 7", "alarm for 6 30"); a lookbehind,
# so every pattern's match starts at the time itself and the longest reading of one spot wins.
_AFTER_PREPOSITION = r"(?:(?<=\bat )|(?<=\bfor )|(?<=\buntil )|(?<=\btill )|(?<=\bby ))"
_NOT_A_UNIT = r"(?!\s*(?:(?:hours?|minutes?|seconds?|mins?|secs?|hrs?)\b|:|\d))"
_CLOCK_PATTERNS = [
    re.compile(r"\b(?P<word>noon|midday|midnight)\b"),
    re.compile(r"\b(?P<rel>half|quarter|\d{1,2})(?:\s+minutes?)?\s+(?P<dir>past|after|to|before)\s+"
               r"(?P<h>\d{1,2})\b" + _MERIDIEM),
    re.compile(r"\b(?P<h>\d{1,2}):(?P<m>\d{2})\b" + _MERIDIEM),
    re.compile(r"\b(?P<h>\d{1,2})\s+oh\s+(?P<m1>\d)\b" + _MERIDIEM),
    re.compile(r"\b(?P<h>\d{1,2})\s+(?P<m>\d{2})\s*(?P<mer>am|pm)\b"),
    re.compile(_AFTER_PREPOSITION + r"(?P<h>\d{1,2})\s+(?P<m>\d{2})\b" + _NOT_A_UNIT + _MERIDIEM),
    re.compile(r"\b(?P<h>\d{1,2})\s*(?P<mer>am|pm)\b"),
    re.compile(r"\b(?P<h>\d{1,2})\s+oclock\b" + _MERIDIEM),
    re.compile(_AFTER_PREPOSITION + r"(?P<hm>\d{3,4})\b" + _MERIDIEM),
    re.compile(r"\b(?P<hm>\d{3,4})\s*(?P<mer>am|pm)\b"),  # "605 am": "six oh five" as one digit string
    re.compile(_AFTER_PREPOSITION + r"(?P<h>\d{1,2})\b" + _NOT_A_UNIT + _MERIDIEM),
]
_MORNING = re.compile(r"\b(?:in the morning|this morning|tomorrow morning)\b")
_EVENING = re.compile(r"\b(?:in the (?:afternoon|evening)|this (?:afternoon|evening)|tonight|at night"
                      r"|tomorrow (?:afternoon|evening|night))\b")
_DAY_WORDS = re.compile(r"\b(?:tomorrow(?: (?:morning|afternoon|evening|night))?|tonight|this (?:morning|"
                        r"afternoon|evening)|in the (?:morning|afternoon|evening)|at night)\b")


def check_timezone_setting(name: str) -> None:
    """`[server] timezone` checked at start-up: a ConfigError that names the option, not a traceback."""
    from wren.config import ConfigError

    try:
        local_timezone(name)
    except ValueError as exc:
        raise ConfigError(f"server.timezone: {exc}") from None


def local_timezone(name: str = "", offset_minutes: int = 0) -> tzinfo:
    """The server's local zone: an IANA name (via zoneinfo) wins over a fixed offset in minutes."""
    if name.strip():
        try:
            return ZoneInfo(name.strip())
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {name!r} (an IANA name such as Europe/London; on systems without a "
                "time zone database, pip install tzdata)"
            ) from None
    return timezone(timedelta(minutes=offset_minutes))


# ---- normalising -------------------------------------------------------------------------------------

def normalise(text: str) -> str:
    """Lower case, `am`/`pm`, `oclock`, no punctuation (the colon of 6:30 kept), numbers as digits."""
    text = text.lower().replace("’", "'")
    text = re.sub(r"\b([ap])\.?\s?m\b\.?", r"\1m", text)  # a.m. / a m / am -> am
    text = re.sub(r"\bo'?\s?clock\b", "oclock", text)
    text = re.sub(r"(\d)\s*(am|pm)\b", r"\1 \2", text)
    text = re.sub(r"(?<=\d)(?=(?:hours?|hrs?|minutes?|mins?|seconds?|secs?)\b)", " ", text)
    text = text.replace("-", " ")
    text = re.sub(r"(?<!\d):|:(?!\d)", " ", text)
    text = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", text)
    text = re.sub(r"[^\w:.' ]+", " ", text)
    text = re.sub(r"\b(?:a\s+)?couple\s+(?:of\s+)?", "two ", text)
    return " ".join(spoken_numbers_to_digits(text.split()))


# ---- durations ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Found:
    """A phrase found in normalised text: its value and the span it covers (lead-in word included)."""

    start: int
    end: int


@dataclass(frozen=True)
class DurationFound(Found):
    seconds: float


def _component_seconds(m: re.Match[str]) -> float:
    if m.group("half"):
        return 0.5 * _UNIT_SECONDS[m.group("hunit")]
    if m.group("unit") is None:  # quarters of an hour
        return 900.0 * int(m.group("q") or 1)
    unit = _UNIT_SECONDS[m.group("unit").rstrip("s")]
    count = float(m.group("n")) if m.group("n") else 1.0
    if m.group("and_half") or m.group("half_after"):
        count += 0.5
    return count * unit


def _with_lead_in(text: str, start: int) -> int:
    lead = _LEAD_IN.search(text[:start])
    return lead.start() if lead else start


def _is_ordinal(text: str, m: re.Match[str]) -> bool:
    """ "a second timer" is an ordinal, not one second."""
    seconds = (m.group("unit") or "").startswith("sec")
    return bool(m.group("a") and seconds and _ORDINAL_AFTER.match(text, m.end()))


def find_duration(text: str) -> DurationFound | None:
    """The first duration in normalised text, its components added up ("1 hour and 30 minutes")."""
    matches = [m for m in _COMPONENT.finditer(text) if not _is_ordinal(text, m)]
    if not matches:
        return None
    first = matches[0]
    total, end = _component_seconds(first), first.end()
    for m in matches[1:]:
        if not _JOINER.fullmatch(text[end:m.start()]):
            break
        total, end = total + _component_seconds(m), m.end()
    return DurationFound(_with_lead_in(text, first.start()), end, total)


# ---- times of day ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TimeOfDayFound(Found):
    hour: int  # 0..23, or 1..12 when `meridiem` is None and the hour is ambiguous
    minute: int
    meridiem: str | None  # "am", "pm" or None (not said)
    tomorrow: bool


def _clock_from(m: re.Match[str]) -> tuple[int, int, str | None] | None:
    groups = m.groupdict()
    mer = groups.get("mer")
    if groups.get("word"):
        return (0, 0, "am") if groups["word"] == "midnight" else (12, 0, "pm")
    if groups.get("hm"):
        digits = groups["hm"]
        hour, minute = int(digits[:-2]), int(digits[-2:])
    elif groups.get("rel"):
        rel = groups["rel"]
        minutes = 30 if rel == "half" else 15 if rel == "quarter" else int(rel)
        hour = int(groups["h"])
        if not 0 < minutes < 60 or hour > 23:
            return None
        if groups["dir"] in ("to", "before"):
            hour, minute = (hour - 1) % 24 if hour else 23, 60 - minutes
            if hour == 0 and mer is None and int(groups["h"]) != 0:
                hour = 12  # "quarter to one": 12:45, whichever half of the day comes next
        else:
            minute = minutes
    else:
        hour = int(groups["h"])
        minute = int(groups["m"]) if groups.get("m") else int(groups["m1"]) if groups.get("m1") else 0
    if hour > 23 or minute > 59:
        return None
    if hour > 12:
        mer = None  # 24-hour clock: "18:30 pm" is still 18:30
    return hour, minute, mer


def find_time_of_day(text: str) -> TimeOfDayFound | None:
    """The first clock time in normalised text ("at 7", "6:30 am", "half past 6", "noon", "7 oclock")."""
    best: tuple[re.Match[str], tuple[int, int, str | None]] | None = None
    for pattern in _CLOCK_PATTERNS:
        for m in pattern.finditer(text):
            clock = _clock_from(m)
            if clock is not None:
                # the earliest phrase wins; of two starting together, the longer ("at 6 30 pm" over "at 6")
                if best is None or (m.start(), -m.end()) < (best[0].start(), -best[0].end()):
                    best = (m, clock)
                break
    if best is None:
        return None
    m, (hour, minute, mer) = best
    if mer is None and hour <= 12:
        if _MORNING.search(text):
            mer = "am"
        elif _EVENING.search(text):
            mer = "pm"
    if mer == "am" and hour == 12:
        hour = 0
    elif mer == "pm" and hour < 12:
        hour += 12
    start = _with_lead_in(text, m.start())
    return TimeOfDayFound(start, m.end(), hour, minute, mer, "tomorrow" in text)


def day_words_span(text: str) -> list[tuple[int, int]]:
    """Spans of "tomorrow", "tonight", "in the morning"… (cut from a reminder's task with the time)."""
    return [(m.start(), m.end()) for m in _DAY_WORDS.finditer(text)]


def next_occurrence(found: TimeOfDayFound, now: datetime, morning: bool = False) -> datetime:
    """The next time the clock shows `found` after `now` (local): past today means tomorrow. An hour
    without am/pm (1..12) is whichever half of the day comes first, or the morning one if `morning`."""
    unambiguous = found.meridiem is not None or found.hour == 0 or found.hour > 12
    if unambiguous or (morning and found.hour < 12):
        hours = [found.hour]
    else:
        hours = [found.hour % 12, found.hour % 12 + 12]
    day = now.date() + timedelta(days=1 if found.tomorrow else 0)
    candidates = []
    for hour in hours:
        due = datetime.combine(day, time(hour, found.minute), tzinfo=now.tzinfo)
        if not found.tomorrow and due <= now:
            due = datetime.combine(day + timedelta(days=1), time(hour, found.minute), tzinfo=now.tzinfo)
        candidates.append(due)
    return min(candidates)


# ---- speaking ----------------------------------------------------------------------------------------

def _parts(seconds: float) -> list[tuple[int, str]]:
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if total < 120 and total % 60:
        return [(total, "second")]  # "90 seconds", as people say it
    if hours:
        secs = 0  # "1 hour and 20 minutes" is precise enough
    return [(n, unit) for n, unit in ((hours, "hour"), (minutes, "minute"), (secs, "second")) if n]


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def speak_duration(seconds: float) -> str:
    """ "5 minutes", "1 hour and 30 minutes", "1 minute and 30 seconds" (at least "1 second")."""
    parts = _parts(seconds) or [(1, "second")]
    return _join([f"{n} {unit}{'' if n == 1 else 's'}" for n, unit in parts])


def duration_adjective(seconds: float) -> str:
    """ "5 minute", "1 hour and 30 minute": the form before a noun ("your 5 minute timer")."""
    parts = _parts(seconds) or [(1, "second")]
    return _join([f"{n} {unit}" for n, unit in parts])


def speak_clock(when: datetime) -> str:
    """ "7 AM", "6:30 PM", "12 PM" (noon), "12 AM" (midnight)."""
    hour = when.hour % 12 or 12
    suffix = "AM" if when.hour < 12 else "PM"
    return f"{hour} {suffix}" if when.minute == 0 else f"{hour}:{when.minute:02d} {suffix}"


def speak_when(when: datetime, now: datetime) -> str:
    """ "6 PM", "6 PM tomorrow", or "6 PM on Friday" for later days."""
    days = (when.date() - now.date()).days
    if days <= 0:
        return speak_clock(when)
    if days == 1:
        return f"{speak_clock(when)} tomorrow"
    return f"{speak_clock(when)} on {when:%A}"
