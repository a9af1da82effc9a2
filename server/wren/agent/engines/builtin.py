"""The builtin engine: useful offline with no model weights.

It greets, tells the time and the date, remembers the user's name (engine state, persisted per
session), answers "what can you do" from the tools actually available, calls device and server tools
by intent with arguments extracted from the words (see `intent.py`), confirms the result in words,
and says honestly when it does not understand.

Matching works on normalised text (`wren.agent.nlu`): exact patterns first, then relative changes
("louder"), then tools, then social phrases, then a tolerant sound-alike guess at the fixed intents
that asks "Did you mean the time or the date?" when two are too close (the pending question is kept
in the engine state for the next turn). The CPU-bound matchers run in a small thread pool, so a
hostile input never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import calendar
import json
import re
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from wren.agent.engines.base import TurnContext
from wren.agent.engines.intent import COLOURS, ToolMatch, first_sentence, match_tool
from wren.agent.events import Emotion, TextChunk, TurnEvent
from wren.agent.everyday import everyday_answer
from wren.agent.nlu import (
    CANCEL,
    RelativeChange,
    clarifying_question,
    exact_intent,
    fuzzy_intent,
    normalize_words,
    parse_relative_change,
    resolve_clarification,
)
from wren.agent.nlu.fixed import LABELS as CLARIFIABLE
from wren.agent.nlu.normalize import MAX_RAW_CHARS
from wren.agent.nlu.relative import DEFAULT_CURRENT, find_getter, find_setter, new_value, read_value
from wren.agent.timer_skill import FIXED_REPLIES as TIMER_FIXED_REPLIES
from wren.agent.timer_skill import TimerSkill
from wren.agent.timers import TimerService
from wren.tools.router import humanize_tool_name
from wren.tools.spec import ToolSpec

_NAME_STATEMENT = re.compile(
    r"\b(?:my name is|my name's|call me|i am called|i'm called)\s+([a-z][a-z' -]{0,40})", re.IGNORECASE
)
_NAME_STOP = {"and", "please", "thanks", "thank", "what", "so", "but", "i", "remember", "you", "okay"}
_TRIVIAL_RESULTS = {"", "true", "ok", "okay", "done", "success", "null", "none"}
_CLARIFY_KEY = "clarify"  # engine state: the intents of the clarifying question asked last turn
# Paragraphs answered in one turn (a message and the follow-ups merged into it) and the characters
# of the turn's text read: a hostile message cannot make one turn answer thousands of paragraphs.
_MAX_PARTS = 6
_MAX_TURN_CHARS = 4 * MAX_RAW_CHARS
# The matchers are CPU-bound (bounded, but a hostile 60 KB query still costs milliseconds): they run
# here rather than on the event loop. Two threads: the box has few cores and each call is short.
_MATCHER_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="wren-matcher")
_T = TypeVar("_T")


# Fixed replies: their audio is made once at start (wren.speech.tts.phrase_cache), so they start at once.
NOT_UNDERSTOOD = "Sorry, I don't understand that yet. Ask me what I can do to hear what I know."
NOTHING_HEARD = "I didn't catch anything. Could you say that again?"
NAME_UNKNOWN = "I don't know your name yet. You can tell me by saying: my name is, and then your name."
ASSISTANT_NAME = "I'm Wren, your offline voice assistant."
WELCOME = "You're welcome."
GOODBYE = "Goodbye!"
NEVER_MIND = "Okay, never mind."
GREETING = "Hello! How can I help?"
CAPABILITIES = ("I can tell you the time and the date, set timers, alarms and reminders, do sums and unit "
                "conversions, and remember your name.")
FIXED_REPLIES = (NOT_UNDERSTOOD, NOTHING_HEARD, NAME_UNKNOWN, ASSISTANT_NAME, WELCOME, GOODBYE, NEVER_MIND,
                 GREETING, CAPABILITIES, *TIMER_FIXED_REPLIES)
# The first clauses of replies that vary after them ("Today is Thursday, December 3, 2026."): cached too,
# so such a reply starts at once and the rest is synthesised while they play (wren.speech.tts.phrase_cache).
# (calendar.day_name: the names `{now:%A}` gives in the date reply, in whatever locale it runs.)
LEAD_INS = ("Okay,", "Done,", "Nice to meet you,", *(f"Today is {day}," for day in calendar.day_name))


async def _off_loop(fn: Callable[..., _T], *args: Any) -> _T:
    return await asyncio.get_running_loop().run_in_executor(_MATCHER_POOL, fn, *args)


def _extract_name(text: str) -> str | None:
    match = _NAME_STATEMENT.search(text[:MAX_RAW_CHARS].replace("\u2019", "'"))
    if not match:
        return None
    words = []
    for word in re.split(r"[\s,.!?]+", match.group(1).strip()):
        if not word or word.lower() in _NAME_STOP or len(words) == 3:
            break
        words.append(word)
    # "ALICE" typed in capitals (or a recogniser that shouts) is Alice; "McKay" keeps its capitals.
    return " ".join(w[:1].upper() + (w[1:].lower() if w.isupper() else w[1:]) for w in words) or None


def _name_from_history(history: list[dict[str, str]]) -> str | None:
    for item in reversed(history):
        if item.get("role") == "user":
            name = _extract_name(item.get("content", ""))
            if name:
                return name
    return None


def _last_reply(history: list[dict[str, str]]) -> str | None:
    return next((item.get("content") for item in reversed(history) if item.get("role") == "assistant"), None)


def _describe_tool(tool: ToolSpec) -> str:
    """One short phrase for a tool: its description's first sentence, else its humanised name."""
    sentence = first_sentence(tool.description).rstrip(".!?") if tool.description else ""
    if not sentence or len(sentence) > 90:
        sentence = humanize_tool_name(tool.name)
    return sentence[:1].lower() + sentence[1:]


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        items: list[tuple[str, Any]] = []
        for key, inner in value.items():
            items += _flatten(inner, f"{prefix} {key}".strip())
        return items
    return [(prefix.replace("_", " "), value)]


def _spoken_value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _colour_name(args: dict[str, Any]) -> str | None:
    """The colour word for r/g/b arguments, or a colour string argument."""
    lowered = {k.lower(): v for k, v in args.items()}
    for key, value in lowered.items():
        if ("colour" in key or "color" in key) and isinstance(value, str):
            return value
    rgb = tuple(lowered.get(a, lowered.get(b)) for a, b in (("r", "red"), ("g", "green"), ("b", "blue")))
    return next((name for name, value in COLOURS.items() if value == rgb), None)


class BuiltinEngine:
    name = "builtin"
    _timers: TimerSkill | None = None  # timers, alarms, reminders: given by the AgentLoop (use_timers)

    def fixed_phrases(self) -> list[str]:
        """Replies that never change, and the fixed first clauses of others (the server caches their audio
        at start)."""
        return [*FIXED_REPLIES, *LEAD_INS]

    def use_timers(self, service: TimerService) -> None:
        self._timers = TimerSkill(service)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def respond(self, ctx: TurnContext) -> AsyncIterator[TurnEvent]:
        # Follow-ups merged at a safe boundary arrive as paragraphs: answer each in order.
        paragraphs = ctx.text[:_MAX_TURN_CHARS].split("\n\n")
        parts = [p.strip() for p in paragraphs if p.strip()][:_MAX_PARTS] or [""]
        for index, part in enumerate(parts):
            if index:
                yield TextChunk(" ")
            async for event in self._respond_one(ctx, part):
                yield event

    async def _respond_one(self, ctx: TurnContext, text: str) -> AsyncIterator[TurnEvent]:
        timer = await self._timers.respond(ctx.session_key, text, ctx.now()) if self._timers else None
        if timer is not None:  # timers, alarms and reminders (wren.agent.timer_skill)
            yield Emotion(timer.emotion)
            yield TextChunk(timer.text)
            return
        words = normalize_words(text)
        normal = " ".join(words)
        asked = ctx.state.pop(_CLARIFY_KEY, None)  # a clarifying question is answered now or dropped

        name = _extract_name(text)
        if name:
            ctx.state["user_name"] = name
            yield Emotion("happy")
            yield TextChunk(f"Nice to meet you, {name}. I'll remember your name.")
            return
        options = [o for o in asked if o in CLARIFIABLE] if isinstance(asked, list) else []
        if options:
            choice = resolve_clarification(words, options)
            if choice == CANCEL:
                yield Emotion("neutral")
                yield TextChunk(NEVER_MIND)
                return
            if choice is not None:
                async for event in self._fixed_intent(ctx, choice):
                    yield event
                return
        everyday = everyday_answer(words, _last_reply(ctx.history))
        if everyday is not None:  # arithmetic, unit conversions, "repeat that", "stop" (wren.agent.everyday)
            yield Emotion("neutral")
            yield TextChunk(everyday)
            return
        intent = exact_intent(normal, words)
        if intent is not None:
            async for event in self._fixed_intent(ctx, intent):
                yield event
            return

        tools = ctx.tools.tools
        change = parse_relative_change(words) if tools else None
        setter = find_setter(tools, change.quantity) if change else None
        if change and setter:
            async for event in self._adjust(ctx, change, *setter):
                yield event
            return
        match = await _off_loop(match_tool, text, tools) if tools else None
        if match is not None:
            async for event in self._use_tool(ctx, match):
                yield event
            return

        social = exact_intent(normal, words, social=True)
        guess = None if social else await _off_loop(fuzzy_intent, words)
        chosen = social or (guess.intent if guess else None)
        if chosen:
            async for event in self._fixed_intent(ctx, chosen):
                yield event
            return
        if guess is not None and guess.options:
            ctx.state[_CLARIFY_KEY] = list(guess.options)
            yield Emotion("thinking")
            yield TextChunk(clarifying_question(guess.options))
            return
        yield Emotion("confused")
        if not text:
            yield TextChunk(NOTHING_HEARD)
        else:
            yield TextChunk(
                NOT_UNDERSTOOD
            )

    async def _fixed_intent(self, ctx: TurnContext, intent: str) -> AsyncIterator[TurnEvent]:
        """The reply for a fixed intent (wren.agent.nlu.fixed), however it was recognised."""
        if intent == "ask_name":
            known = ctx.state.get("user_name") or _name_from_history(ctx.history)
            if known:
                ctx.state["user_name"] = known
                yield Emotion("happy")
                yield TextChunk(f"Your name is {known}.")
            else:
                yield Emotion("thinking")
                yield TextChunk(
                    NAME_UNKNOWN
                )
        elif intent == "assistant_name":
            yield Emotion("happy")
            yield TextChunk(ASSISTANT_NAME)
        elif intent == "capability":
            yield Emotion("happy")
            for chunk in self._capabilities(ctx):
                yield TextChunk(chunk)
        elif intent == "time":
            now = ctx.now()
            hour = now.hour % 12 or 12
            yield Emotion("neutral")
            yield TextChunk(f"It's {hour}:{now.minute:02d} {'AM' if now.hour < 12 else 'PM'}.")
        elif intent == "date":
            now = ctx.now()
            yield Emotion("neutral")
            yield TextChunk(f"Today is {now:%A}, {now:%B} {now.day}, {now.year}.")
        elif intent == "greet":
            who = ctx.state.get("user_name")
            yield Emotion("happy")
            yield TextChunk(f"Hello{', ' + who if who else ''}! How can I help?")
        elif intent == "thanks":
            yield Emotion("happy")
            yield TextChunk(WELCOME)
        else:  # "bye"
            yield Emotion("happy")
            yield TextChunk(GOODBYE)

    async def _adjust(self, ctx: TurnContext, change: RelativeChange, setter: ToolSpec,
                      prop: str) -> AsyncIterator[TurnEvent]:
        """ "louder": read the current value from a status tool, set current +/- the step."""
        yield Emotion("thinking")
        quantity = change.quantity
        current: float | None = None
        getter = find_getter(ctx.tools.tools, quantity)
        if getter is not None:
            status = await ctx.tools.call(getter.name, {})
            current = read_value(status.text, quantity) if status.ok else None
        schema = setter.properties.get(prop) or {}
        value = new_value(DEFAULT_CURRENT if current is None else current, change, schema)
        if current is not None and value == round(current):
            yield Emotion("neutral")
            limit = "maximum" if change.direction > 0 else "minimum"
            yield TextChunk(f"The {quantity} is already at the {limit}, {value}.")
            return
        argument = value if schema.get("type") != "number" else float(value)
        result = await ctx.tools.call(setter.name, {prop: argument})
        if not result.ok:
            yield Emotion("sad")
            yield TextChunk(f"Sorry, that didn't work. {result.text}")
            return
        yield Emotion("happy")
        if current is None:  # said honestly: the new value is a guess from a default
            yield TextChunk(f"I couldn't read the current {quantity}, so I set it to {value}.")
        else:
            yield TextChunk(f"Done, the {quantity} is now {value}.")

    def _capabilities(self, ctx: TurnContext) -> list[str]:
        chunks = [CAPABILITIES]
        tools = ctx.tools.tools
        if tools:
            phrases = [_describe_tool(t) for t in tools[:6]]
            more = len(tools) - len(phrases)
            listing = "; ".join(phrases)
            extra = f", and {more} more" if more > 0 else ""
            chunks.append(f" With the tools I have, I can also: {listing}{extra}.")
        return chunks

    async def _use_tool(self, ctx: TurnContext, match: ToolMatch) -> AsyncIterator[TurnEvent]:
        yield Emotion("thinking")
        result = await ctx.tools.call(match.tool.name, match.arguments)
        if not result.ok:
            yield Emotion("sad")
            yield TextChunk(f"Sorry, that didn't work. {result.text}")
            return
        yield Emotion("happy")
        yield TextChunk(self._confirmation(match, result.text))

    def _confirmation(self, match: ToolMatch, result: str) -> str:
        tool, args = match.tool, match.arguments
        stripped = result.strip()
        if stripped.lower() == "false":
            return f"Sorry, the {humanize_tool_name(tool.name)} tool said no."
        parsed: Any = None
        if stripped[:1] in "{[":
            try:
                parsed = json.loads(stripped)
            except ValueError:
                parsed = None
        if isinstance(parsed, dict | list):
            return self._summarise(parsed, match)
        if args and stripped.lower() in _TRIVIAL_RESULTS:
            colour = _colour_name(args)
            if colour:
                skip = ("set", "rgb", "colour", "color")
                subject = " ".join(w for w in humanize_tool_name(tool.name).split() if w not in skip)
                return f"Done, the {subject or 'light'} is now {colour}."
            if len(args) == 1:
                (key, value), = args.items()
                return f"Done, the {key.replace('_', ' ')} is now {_spoken_value(value)}."
            listing = ", ".join(f"{k.replace('_', ' ')} {_spoken_value(v)}" for k, v in args.items())
            return f"Done: {humanize_tool_name(tool.name)}, {listing}."
        if stripped.lower() in _TRIVIAL_RESULTS:
            return f"Done: {humanize_tool_name(tool.name)}."
        return stripped if len(stripped) <= 300 else stripped[:300].rsplit(" ", 1)[0] + "."

    def _summarise(self, data: Any, match: ToolMatch) -> str:
        pairs = [(k, v) for k, v in _flatten(data) if k and not isinstance(v, list)]
        focus = [w for w in match.matched if w not in ("status", "device")]
        if focus:
            focused = [(k, v) for k, v in pairs if any(f in k for f in focus)]
            pairs = focused or pairs
        if not pairs:
            return "Done."
        parts = [f"{k} {_spoken_value(v)}" for k, v in pairs[:6]]
        return "Here is what I found: " + ", ".join(parts) + "."
