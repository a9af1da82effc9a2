"""The builtin engine's timers skill: set, ask about and cancel timers, alarms and reminders, in words.

"set a timer for five minutes", "a 10 minute timer", "set a pasta timer for 8 minutes", "how long is
left", "cancel the timer", "wake me up at seven", "set an alarm for 6:30 am", "remind me at six to call
mum", "remind me in ten minutes to check the oven", "what timers do I have". Parsing is
`wren.agent.timeparse`; keeping and ringing is `wren.agent.timers.TimerService`. `respond()` returns
None for anything that is not about timers, so the engine's other intents get their turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from wren.agent.timeparse import (
    DurationFound,
    TimeOfDayFound,
    day_words_span,
    duration_adjective,
    find_duration,
    find_time_of_day,
    next_occurrence,
    normalise,
    speak_duration,
    speak_when,
)
from wren.agent.timers import MAX_PER_SESSION, TimerLimitReached, TimerService
from wren.store.records import TimerRow

MAX_TIMER_S = 24 * 3600
MAX_REQUEST_CHARS = 300
_KIND = re.compile(r"\b(?P<kind>timer|alarm|reminder|count ?down)s?\b")
_WAKE = re.compile(r"\bwake me\b")
_REMIND = re.compile(r"\bremind me\b|\b(?:set|add|create|make) (?:a|an|me a) reminder\b|^reminder\b")
# Past tenses too: a recogniser writes "Cancelled the timer." for a clipped "cancel the timer".
_CANCEL = re.compile(r"\b(?:cancel(?:l?ed)?|stop(?:ped)?|delete[ds]?|remove[ds]?|clear(?:ed)?|"
                     r"turn(?:ed)? off|switch(?:ed)? off|dismiss(?:ed)?|kill(?:ed)?|end(?:ed)?|forget|"
                     r"disabled?|get rid of|never mind|reset)\b")
_SETTING = re.compile(r"\b(?:set|start|make|create|add|new|put)\b")
_ALL = re.compile(r"\b(?:all|every|everything|both)\b")
# "how long is left" is about timers on its own; "how long until …" only when a timer or alarm is named.
_LEFT = re.compile(r"\bhow (?:long|much (?:time|longer)|many (?:hours|minutes|seconds))\b.*"
                   r"\b(?:left|remaining|to go)\b|\bhow much longer\b|\btime (?:left|remaining)\b")
_UNTIL = re.compile(r"\bhow (?:long|much (?:time|longer)|many (?:hours|minutes|seconds))\b.*"
                    r"\b(?:until|till|before|on)\b")
_LIST = re.compile(r"\b(?:what|which|any|list|show|tell me|read|how many|when)\b")
_NAMED = re.compile(r"\b(?:called|named|for the|labelled|labeled) (?P<name>[a-z']+(?: [a-z']+)?)"
                    r"(?= for\b| in\b|$)")
_BEFORE_TIMER = re.compile(r"\b(?:a|an|the|my|your|this|that)\s+(?P<words>(?:[a-z0-9']+\s+){1,2}?)timer\b")
_NOT_A_NAME = {"new", "another", "second", "quick", "count", "minute", "minutes", "hour", "hours", "seconds",
               "min", "mins", "sec", "secs", "and", "a", "an", "half", "quarter", "of", "the", "my",
               "current"}
_SWAP = {"my": "your", "me": "you", "i": "you", "i'm": "you're", "myself": "yourself", "mine": "yours"}
_TASK_LEAD = re.compile(r"^(?:(?:please|and|to|that|about|of|for|so)\s+)+")
_TASK_TAIL = re.compile(r"(?:\s+(?:please|thanks|thank you|and|to|at|in|on|for))+$")
_PLURAL = {"timer": "timers", "alarm": "alarms", "reminder": "reminders"}

# Replies that never change: the server caches their audio at start (BuiltinEngine.fixed_phrases).
ASK_DURATION = "For how long? You can say, for example: set a timer for five minutes."
TOO_LONG = "I can set timers for up to 24 hours. For later than that, set an alarm."
ASK_ALARM_TIME = "What time should I set the alarm for? You can say, for example: wake me up at seven."
ASK_REMINDER_TIME = ("When should I remind you? You can say, for example: remind me in ten minutes to check "
                     "the oven.")
FIXED_REPLIES = (ASK_DURATION, TOO_LONG, ASK_ALARM_TIME, ASK_REMINDER_TIME)


@dataclass(frozen=True)
class SkillReply:
    text: str
    emotion: str = "happy"


def _kind_of(match: re.Match[str] | None) -> str | None:
    if match is None:
        return None
    kind = match.group("kind")
    return "timer" if kind.startswith("count") else kind


def _timer_name(text: str) -> str:
    """A named timer's name: "a pasta timer", "the egg timer", "a timer called pasta"."""
    named = _NAMED.search(text)
    if named and not any(w in _NOT_A_NAME or w.isdigit() for w in named.group("name").split()):
        return named.group("name")
    before = _BEFORE_TIMER.search(text)
    if before:
        words = [w for w in before.group("words").split() if w not in _NOT_A_NAME and not w.isdigit()]
        return " ".join(words)
    return ""


def _task(text: str, cut: list[tuple[int, int]]) -> tuple[str, str]:
    """The reminder's words seen from the listener, and what links them to the time: "remind me at 6 to
    call my mum" -> ("to", "call your mum")."""
    for start, end in sorted(cut, reverse=True):
        text = text[:start] + " " + text[end:]
    trigger = re.search(r"\bremind me\b|\breminder\b", text)
    if trigger:
        text = text[trigger.end():]
    text = " ".join(text.split())
    lead = _TASK_LEAD.match(text)
    link = "that" if lead and "that" in lead.group().split() else "to"  # "remind me that the shop closes"
    text = _TASK_TAIL.sub("", text[lead.end():] if lead else text)
    text = re.sub(r"\bi am\b", "you are", text)  # normalised upstream, "i'm" arrives as "i am"
    return link, " ".join(_SWAP.get(w, w) for w in text.split())


def _when(text: str) -> tuple[DurationFound | None, TimeOfDayFound | None]:
    """The duration and clock time said; a duration inside a clock time ("5 minutes past 6") is not one."""
    duration, clock = find_duration(text), find_time_of_day(text)
    if duration and clock and clock.start <= duration.start < clock.end:
        duration = None
    if duration and clock:  # both said: the first one decides ("in 10 minutes ... at the shop 2")
        return (duration, None) if duration.start < clock.start else (None, clock)
    return duration, clock


def _describe(timer: TimerRow, now: datetime) -> str:
    """ "the pasta timer", "the 5 minute timer", "your alarm for 7 AM", "the reminder to call mum"."""
    if timer.kind == "timer":
        return f"the {timer.label or duration_adjective(timer.due_at - timer.created_at)} timer"
    due = datetime.fromtimestamp(timer.due_at, now.tzinfo)
    if timer.kind == "alarm":
        return f"your alarm for {speak_when(due, now)}"
    if timer.label:
        return f"the reminder to {timer.label}"
    return f"your reminder at {speak_when(due, now)}"


def _state(timer: TimerRow, now: datetime, alone: bool) -> str:
    """ "the pasta timer has 3 minutes left", "your alarm is set for 7 AM tomorrow"; in a list of several
    of one kind (`alone` False) alarms and reminders are shorter: "7 AM tomorrow", "6 PM to call mum"."""
    left = timer.due_at - now.timestamp()
    due = datetime.fromtimestamp(timer.due_at, now.tzinfo)
    if timer.kind == "timer":
        if left <= 0:
            return f"{_describe(timer, now)} is done"
        left = round(left / 60) * 60 if left >= 600 else left  # seconds only matter near the end
        return f"{_describe(timer, now)} has {speak_duration(left)} left"
    task = f" to {timer.label}" if timer.kind == "reminder" and timer.label else ""
    if not alone:
        return f"{speak_when(due, now)}{task}"
    if timer.kind == "alarm":
        return f"your alarm is set for {speak_when(due, now)}"
    return f"I'll remind you at {speak_when(due, now)}{task}"


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else "; ".join(items[:-1]) + f"; and {items[-1]}"


def _a(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def _named(timer: TimerRow, name: str) -> bool:
    return bool(timer.label) and (name in timer.label or timer.label in name)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + "."


class TimerSkill:
    def __init__(self, service: TimerService) -> None:
        self.service = service

    async def respond(self, session_key: str, text: str, now: datetime) -> SkillReply | None:
        """Words for a timer, alarm or reminder request; None when `text` is about something else."""
        if len(text) > MAX_REQUEST_CHARS:
            return None  # nobody asks for a timer in a paragraph; and the patterns stay cheap
        norm = normalise(text)
        kind_match = _KIND.search(norm)
        kind = _kind_of(kind_match)
        cancel = _CANCEL.search(norm)
        if kind_match and cancel and cancel.start() < kind_match.start():
            return await self._cancel(session_key, norm, kind or "timer", now)
        if _LEFT.search(norm) or (kind_match and _UNTIL.search(norm)):
            return self._status(session_key, norm, kind or "timer", now)
        if _REMIND.search(norm):
            return await self._remind(session_key, norm, now)
        asking = bool(kind_match and _LIST.search(norm) and not _SETTING.search(norm))
        asking = asking and not any(_when(norm))  # "what alarms do i have", not "an alarm for when …"
        if (_WAKE.search(norm) or kind == "alarm") and not asking:
            return await self._alarm(session_key, norm, now)
        if asking:
            return self._status(session_key, norm, kind, now)
        if kind == "timer":
            return await self._timer(session_key, norm, now)
        return None

    # ---- setting ---------------------------------------------------------------------------------------

    async def _add(self, session_key: str, kind: str, label: str, due: datetime, confirm: str) -> SkillReply:
        try:
            await self.service.add(session_key, kind, label, due.timestamp())
        except TimerLimitReached:
            return SkillReply(f"You already have {MAX_PER_SESSION} timers, alarms and reminders. Cancel one "
                              "first.", "sad")
        return SkillReply(confirm)

    async def _timer(self, session_key: str, norm: str, now: datetime) -> SkillReply:
        duration = find_duration(norm)
        if duration is None:
            return SkillReply(ASK_DURATION, "thinking")
        if duration.seconds > MAX_TIMER_S:
            return SkillReply(TOO_LONG, "sad")
        seconds = max(1.0, duration.seconds)
        name = _timer_name(norm)
        what = f"{_a(name)} timer" if name else "a timer"
        return await self._add(session_key, "timer", name, now + timedelta(seconds=seconds),
                               f"Okay, {what} for {speak_duration(seconds)}, starting now.")

    async def _alarm(self, session_key: str, norm: str, now: datetime) -> SkillReply:
        wake = bool(_WAKE.search(norm))
        duration, clock = _when(norm)
        if duration is not None:
            due = now + timedelta(seconds=min(max(1.0, duration.seconds), MAX_TIMER_S))
            when = f"in {speak_duration(due.timestamp() - now.timestamp())}, at {speak_when(due, now)}"
        elif clock is not None:
            due = next_occurrence(clock, now, morning=wake)
            when = f"at {speak_when(due, now)}"
        else:
            return SkillReply(ASK_ALARM_TIME, "thinking")
        confirm = f"Okay, I'll wake you up {when}." if wake else f"Okay, your alarm is set for {when[3:]}."
        if not wake and duration is not None:
            confirm = f"Okay, your alarm will go off {when}."
        return await self._add(session_key, "alarm", "wake up" if wake else "", due, confirm)

    async def _remind(self, session_key: str, norm: str, now: datetime) -> SkillReply:
        duration, clock = _when(norm)
        cut = day_words_span(norm)
        if duration is not None:
            due = now + timedelta(seconds=min(max(1.0, duration.seconds), MAX_TIMER_S))
            when = f"in {speak_duration(due.timestamp() - now.timestamp())}"
            cut.append((duration.start, duration.end))
        elif clock is not None:
            due = next_occurrence(clock, now)
            when = f"at {speak_when(due, now)}"
            cut.append((clock.start, clock.end))
        else:
            return SkillReply(ASK_REMINDER_TIME, "thinking")
        link, task = _task(norm, cut)
        confirm = f"I'll remind you {when} {link} {task}." if task else f"Okay, I'll remind you {when}."
        return await self._add(session_key, "reminder", task, due, confirm)

    # ---- asking and cancelling ------------------------------------------------------------------------

    def _status(self, session_key: str, norm: str, kind: str | None, now: datetime) -> SkillReply:
        timers = [t for t in self.service.pending(session_key) if kind is None or t.kind == kind]
        name = _timer_name(norm) if kind == "timer" else ""
        if name and timers:
            timers = [t for t in timers if _named(t, name)]
            if not timers:
                return SkillReply(f"I couldn't find {_a(name)} timer.", "confused")
        if not timers:
            what = _PLURAL.get(kind or "", "timers, alarms or reminders")
            return SkillReply(f"You don't have any {what} set.", "neutral")
        if len(timers) == 1:
            return SkillReply(_sentence(_state(timers[0], now, True).replace("the ", "your ", 1)), "neutral")
        one_kind = len({t.kind for t in timers}) == 1
        states = [_state(t, now, not one_kind) for t in timers[:5]]
        more = f", and {len(timers) - 5} more" if len(timers) > 5 else ""
        what = _PLURAL[timers[0].kind] if one_kind else "timers, alarms and reminders"
        return SkillReply(f"You have {len(timers)} {what}: {_listing(states)}{more}.", "neutral")

    async def _cancel(self, session_key: str, norm: str, kind: str, now: datetime) -> SkillReply:
        timers = [t for t in self.service.pending(session_key) if t.kind == kind]
        if not timers:
            return SkillReply(f"You don't have any {_PLURAL[kind]} set.", "neutral")
        name = _timer_name(norm) if kind == "timer" else ""
        if name:
            timers = [t for t in timers if _named(t, name)]
            if not timers:
                return SkillReply(f"I couldn't find {_a(name)} timer.", "confused")
        chosen = timers if _ALL.search(norm) else timers[:1]  # several, none named: the soonest one
        for timer in chosen:
            await self.service.cancel(timer)
        if len(chosen) > 1:
            return SkillReply(f"Okay, I cancelled all {len(chosen)} {_PLURAL[kind]}.", "neutral")
        reply = f"Okay, I cancelled {_describe(chosen[0], now)}."
        others = len(timers) - 1
        if others:
            reply += f" You still have {others} other {kind if others == 1 else _PLURAL[kind]}."
        return SkillReply(reply, "neutral")
