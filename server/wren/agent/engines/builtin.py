"""The builtin engine: useful offline with no model weights.

It greets, tells the time and the date, remembers the user's name (engine state, persisted per
session), answers "what can you do" from the tools actually available, calls device and server tools
by intent with arguments extracted from the words (see `intent.py`), confirms the result in words,
and says honestly when it does not understand.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from wren.agent.engines.base import TurnContext
from wren.agent.engines.intent import COLOURS, ToolMatch, first_sentence, match_tool
from wren.agent.engines.words import tokens
from wren.agent.events import Emotion, TextChunk, TurnEvent
from wren.tools.router import humanize_tool_name
from wren.tools.spec import ToolSpec

_NAME_STATEMENT = re.compile(
    r"\b(?:my name is|my name's|call me|i am called|i'm called)\s+([a-z][a-z' -]{0,40})", re.IGNORECASE
)
_NAME_QUESTION = re.compile(
    r"\b(what(?:'s| is) my name|who am i|do you (?:know|remember) my name|what am i called)\b", re.IGNORECASE
)
_GREETINGS = {"hello", "hi", "hey", "hiya", "howdy", "greetings", "morning", "evening", "afternoon"}
_CAPABILITY = re.compile(
    r"\b(what can you do|what do you do|what are you able to do|what can i ask|help me|help|"
    r"your (?:skills|abilities|features|capabilities)|what tools)\b",
    re.IGNORECASE,
)
_TIME = re.compile(r"\b(what time|the time|time is it|current time|what's the time)\b", re.IGNORECASE)
_DATE = re.compile(
    r"\b(what(?:'s| is) the date|today's date|the date|what day|which day|day is it|day is today"
    r"|date today)\b",
    re.IGNORECASE,
)
_THANKS = re.compile(r"\b(thank you|thanks|cheers)\b", re.IGNORECASE)
_BYE = re.compile(r"\b(goodbye|good bye|bye|see you|good night)\b", re.IGNORECASE)
_NAME_STOP = {"and", "please", "thanks", "thank", "what", "so", "but", "i", "remember", "you", "okay"}
_TRIVIAL_RESULTS = {"", "true", "ok", "okay", "done", "success", "null", "none"}


def _extract_name(text: str) -> str | None:
    match = _NAME_STATEMENT.search(text)
    if not match:
        return None
    words = []
    for word in re.split(r"[\s,.!?]+", match.group(1).strip()):
        if not word or word.lower() in _NAME_STOP or len(words) == 3:
            break
        words.append(word)
    return " ".join(w[:1].upper() + w[1:] for w in words) or None


def _name_from_history(history: list[dict[str, str]]) -> str | None:
    for item in reversed(history):
        if item.get("role") == "user":
            name = _extract_name(item.get("content", ""))
            if name:
                return name
    return None


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

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def respond(self, ctx: TurnContext) -> AsyncIterator[TurnEvent]:
        # Follow-ups merged at a safe boundary arrive as paragraphs: answer each in order.
        parts = [p.strip() for p in ctx.text.split("\n\n") if p.strip()] or [""]
        for index, part in enumerate(parts):
            if index:
                yield TextChunk(" ")
            async for event in self._respond_one(ctx, part):
                yield event

    async def _respond_one(self, ctx: TurnContext, text: str) -> AsyncIterator[TurnEvent]:
        lowered = text.lower()
        words = tokens(text)

        name = _extract_name(text)
        if name:
            ctx.state["user_name"] = name
            yield Emotion("happy")
            yield TextChunk(f"Nice to meet you, {name}. I'll remember your name.")
            return
        if _NAME_QUESTION.search(lowered):
            known = ctx.state.get("user_name") or _name_from_history(ctx.history)
            if known:
                ctx.state["user_name"] = known
                yield Emotion("happy")
                yield TextChunk(f"Your name is {known}.")
            else:
                yield Emotion("thinking")
                yield TextChunk(
                    "I don't know your name yet. You can tell me by saying: my name is, and then your name."
                )
            return
        if _CAPABILITY.search(lowered):
            yield Emotion("happy")
            for chunk in self._capabilities(ctx):
                yield TextChunk(chunk)
            return
        if _TIME.search(lowered):
            now = ctx.now()
            hour = now.hour % 12 or 12
            yield Emotion("neutral")
            yield TextChunk(f"It's {hour}:{now.minute:02d} {'AM' if now.hour < 12 else 'PM'}.")
            return
        if _DATE.search(lowered) or (words and "today" in words and "date" in words):
            now = ctx.now()
            yield Emotion("neutral")
            yield TextChunk(f"Today is {now:%A}, {now:%B} {now.day}, {now.year}.")
            return

        match = match_tool(text, ctx.tools.tools)
        if match is not None:
            async for event in self._use_tool(ctx, match):
                yield event
            return

        if words and (words[0] in _GREETINGS or lowered.startswith("good morning")):
            who = ctx.state.get("user_name")
            yield Emotion("happy")
            yield TextChunk(f"Hello{', ' + who if who else ''}! How can I help?")
            return
        if _THANKS.search(lowered):
            yield Emotion("happy")
            yield TextChunk("You're welcome.")
            return
        if _BYE.search(lowered):
            yield Emotion("happy")
            yield TextChunk("Goodbye!")
            return
        yield Emotion("confused")
        if not text:
            yield TextChunk("I didn't catch anything. Could you say that again?")
        else:
            yield TextChunk(
                "Sorry, I don't understand that yet. Ask me what I can do to hear what I know."
            )

    def _capabilities(self, ctx: TurnContext) -> list[str]:
        chunks = ["I can tell you the time and the date, and remember your name."]
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
