"""The words Wren can act on, for biasing the recogniser toward them (`[asr] bias`).

Three sources, in the order people meet them: the built-in engine's own intents (time, date, timers,
volume, lights, names…), the connected device's MCP tools (names, parameter names, enum values, and values
a description quotes in backticks: "volume", "brightness", "theme", "dark"), and names people taught it
(the built-in engine's `user_name`), plus the commands as grammar templates (`wren.agent.commands`), which
a recogniser may be constrained to. Number ranges are left out of the words: the recogniser writes numbers
well and the agent's normaliser reads them in any form. The recogniser (moonshine) rescores near-misses
with them; see `wren.speech.asr.bias` for the rule that decides between the biased and the open transcript.

Bounded: a device may list thousands of properties; at most `MAX_PHRASES` phrases of `MAX_PHRASE_CHARS`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from wren.agent.commands import BUILTIN_TEMPLATES, tool_templates
from wren.speech.asr.grammar import is_template
from wren.tools.router import humanize_tool_name
from wren.tools.spec import ToolSpec

MAX_PHRASES = 400
MAX_PHRASE_CHARS = 60  # a plain phrase; a command template may be longer (wren.speech.asr.grammar bounds it)
MAX_TOOLS = 256

# Canonical phrasings of the built-in engine's intents (what Speech-to-Phrase would enumerate): whole
# sentences are rescored against what was heard, so these are the sentences Wren can act on as people say
# them; the single words give the vocabulary for near-miss words.
BUILTIN_PHRASES = (
    "what time is it", "tell me the time", "what is the date today", "what day is it today",
    "set a timer for five minutes", "how long is left on the timer", "cancel the timer", "stop the timer",
    "set an alarm for seven", "wake me up at six thirty", "remind me at six to call mum",
    "remind me in ten minutes to check the oven",
    "louder", "quieter", "a bit louder", "quieter please", "turn it up", "turn it down", "brighter", "dimmer",
    "set the volume to thirty", "turn the volume up", "turn the volume down", "what is the volume",
    "mute the speaker", "set the brightness to fifty", "dim the screen", "make the screen brighter",
    "turn the light red", "turn the light on", "turn the light off",
    "green blue white yellow orange purple pink",
    "what is the battery level", "is the battery charging", "what is the device status",
    "my name is", "what is my name", "who am i", "what can you do", "repeat that", "stop", "cancel",
    "thank you", "thanks a lot", "goodbye", "good night", "good morning", "good evening", "hello there",
    "hey there", "minutes seconds hours", "percent", "brightness", "volume", "light", "theme", "screen",
    "battery", "charging", "status",
)


def _tool_phrases(tool: ToolSpec) -> list[str]:
    phrases = [humanize_tool_name(tool.name)]
    for name, schema in tool.properties.items():
        phrases.append(re.sub(r"[_.-]+", " ", re.sub(r"([a-z])([A-Z])", r"\1 \2", name)))
        enum = schema.get("enum") if isinstance(schema, dict) else None
        if isinstance(enum, list):
            phrases.extend(str(value) for value in enum[:50] if isinstance(value, str))
    phrases.extend(re.findall(r"`([A-Za-z][A-Za-z ]{1,30})`", tool.description[:2000]))
    return phrases


def recognition_phrases(tools: Iterable[ToolSpec] = (), taught_names: Iterable[str] = ()) -> tuple[str, ...]:
    """The phrase set for one session, most important first, deduplicated and bounded."""
    seen: set[str] = set()
    result: list[str] = []

    def add(phrase: str) -> None:
        phrase = " ".join(phrase.split())
        if not is_template(phrase):
            phrase = phrase[:MAX_PHRASE_CHARS]
        if phrase and phrase.lower() not in seen and len(result) < MAX_PHRASES:
            seen.add(phrase.lower())
            result.append(phrase)

    tools = list(tools)[:MAX_TOOLS]
    for name in taught_names:
        add(name)
    for phrase in BUILTIN_PHRASES:
        add(phrase)
    for template in BUILTIN_TEMPLATES:
        add(template)
    for tool in tools:
        if len(result) >= MAX_PHRASES:
            break
        for phrase in _tool_phrases(tool):
            add(phrase)
    for template in tool_templates(tools):
        add(template)
    return tuple(result)
