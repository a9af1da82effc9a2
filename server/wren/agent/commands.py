"""The sentences the built-in engine acts on, as grammar templates (syntax: `wren.speech.asr.grammar`).

A recogniser constrained to these finds the most likely command in the audio when its open transcript is
not one ("Saint-Lavalio Tatoente." for "set the volume to twenty"); `wren.speech.asr.bias` decides
between the two. They are written from what the engine's matchers accept (nlu/fixed.py, timer_skill.py,
nlu/relative.py, engines/intent.py, everyday.py), not from any test set, and a test checks that the
engine understands sentences drawn from every template (tests/agent/test_commands.py).

Device tools add their own: for each number property "set the <property> to <number>", for each string
enum "set the <property> to <value>", and the name of a tool that needs no argument ("get device status").
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from wren.agent.engines.intent import COLOURS
from wren.tools.router import humanize_tool_name
from wren.tools.spec import ToolSpec

MAX_TOOL_TEMPLATES = 200
_WHAT_IS = "(what is | what's | tell me)"
_UNIT = "(second | seconds | minute | minutes | hour | hours)"
_LIGHT = "(light | lights)"

BUILTIN_TEMPLATES = (
    # time and date
    f"[please] (what time is it [now] | {_WHAT_IS} the [current] time | (tell me | do you have) the time) "
    "[please]",
    f"[please] ({_WHAT_IS} [the] date [today] | {_WHAT_IS} today's date | what day is [it] today "
    "| (what | which) day is it [today] | (tell me | what's) the date) [please]",
    # timers, alarms, reminders
    f"[please] (set | start | create | make) (a | an) timer for {{number}} {_UNIT} [please]",
    "[please] (set | start) a {number} (second | minute | hour) timer [please]",
    "how (long | much time) is left [on (the | my) timer]",
    "how much (time | longer) [is left | is there] [on (the | my) timer]",
    "(cancel | stop | delete | clear) (the | my | all [the] | all my) (timer | timers | alarm | alarms "
    "| reminder | reminders)",
    "(set an alarm | wake me up) (at | for) {number} [{number}] [(am | pm | o'clock)]",
    f"remind me (at | in) {{number}} [{{number}}] [({_UNIT} | am | pm | o'clock)] to {{any}}",
    "remind me to {any}",
    # volume and brightness, relative and absolute (the device's setter does the work)
    "[(make it | a bit | a little)] (louder | quieter | softer | brighter | dimmer | darker) [please]",
    "turn (it | the volume | the sound | the music | the speaker) (up | down) [(a bit | a little)] [please]",
    "(mute | unmute) [the] (speaker | sound | volume | audio)",
    "(dim | brighten) the (screen | display | light)",
    "make the (screen | display) (brighter | dimmer | darker)",
    "(set | change | turn) the (volume | brightness) to (the maximum | the minimum | max | full) [please]",
    # lights
    f"(turn | make | set | change | switch) the {_LIGHT} [to] ({' | '.join(COLOURS)}) [please]",
    f"turn (on | off) the {_LIGHT}",
    f"turn the {_LIGHT} (on | off)",
    # device state
    f"{_WHAT_IS} the (battery | battery level | volume | device status | status)",
    "is the battery charging",
    "how is the (network | battery)",
    "how (bright | loud) is the (screen | speaker)",
    # names and who is who
    "(my name is | call me) {any}",
    "(what is | what's | tell me | say) my name",
    "(who am i | what am i called | do you (know | remember) my name)",
    "(what is | what's) your name",
    "who are you",
    # what Wren can do, and conversation
    "(what can you do | what do you do | what are you able to do | what can i ask [you] | help [me])",
    "what are your (skills | abilities | features)",
    "(repeat that | say that again | what did you say)",
    "(stop | cancel | never mind | be quiet)",
    "(thank you | thanks) [(a lot | very much | so much)]",
    "(goodbye | bye | bye bye | good night | see you [later])",
    "(hello | hi | hey) [(there | wren)]",
    "good (morning | afternoon | evening)",
    # sums
    "what is {number} (plus | minus | times | divided by) {number}",
)


def _words(name: str) -> str:
    return re.sub(r"[_.-]+", " ", re.sub(r"([a-z])([A-Z])", r"\1 \2", name)).lower().strip()


def _clean(text: str) -> str:
    """A device's words made safe for the template syntax (no brackets, bars or braces of its own)."""
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


def tool_templates(tools: Iterable[ToolSpec]) -> list[str]:
    """Commands for a device's MCP tools, from their names and schemas."""
    templates: list[str] = []
    for tool in tools:
        if len(templates) >= MAX_TOOL_TEMPLATES:
            break
        name = _clean(humanize_tool_name(tool.name))
        if name and not tool.required:  # "get device status"; a setter's name alone fills no argument
            templates.append(f"[please] {name} [please]")
        for prop, schema in list(tool.properties.items())[:32]:
            words = _clean(_words(prop))
            if len(words) < 3 or not isinstance(schema, dict):  # "r", "g", "b" are not said
                continue
            if schema.get("type") in ("integer", "number"):
                templates.append(f"[please] (set | change | turn) the {words} to {{number}} [percent] "
                                 "[please]")
            enum = [_clean(str(v)) for v in schema.get("enum", [])[:50] if isinstance(v, str)]
            enum = [v for v in enum if v]
            if enum:
                choices = " | ".join(enum)
                templates.append(f"[please] (set | change | turn | make) the {words} [to] ({choices})")
    return templates[:MAX_TOOL_TEMPLATES]
