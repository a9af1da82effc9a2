"""Pick a tool for an utterance and fill its arguments, from tool names, descriptions and schemas.

Generic on purpose: nothing here knows a particular device. A tool scores by the utterance words
that match its name (strong) and its description's first sentence (weak), with small nudges for the
verb (`set`/`turn` prefer setters, questions prefer getters). Arguments come from the schema:
integers from spoken numbers, booleans from on/off words, colours for r/g/b or colour properties,
strings from the words after "to". A tool is chosen only if its required arguments can be filled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz

from wren.agent.engines.words import NUMBER_WORDS, STOPWORDS, correct, find_number, find_numbers, tokens
from wren.tools.spec import ToolSpec

SYNONYMS = {
    "color": "colour", "colours": "colour", "colors": "colour", "loudness": "volume", "sound": "volume",
    "louder": "volume", "quieter": "volume", "loud": "volume", "brighter": "brightness",
    "bright": "brightness", "dim": "brightness", "dimmer": "brightness", "lights": "light",
    "led": "light", "leds": "light", "lamp": "light", "speaker": "speaker", "stat": "status",
    "state": "status", "info": "status", "information": "status", "battery": "battery",
}
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255), "white": (255, 255, 255),
    "yellow": (255, 255, 0), "orange": (255, 128, 0), "purple": (128, 0, 255), "pink": (255, 105, 180),
    "cyan": (0, 255, 255), "magenta": (255, 0, 255), "warm": (255, 170, 80), "off": (0, 0, 0),
    "black": (0, 0, 0), "violet": (143, 0, 255), "teal": (0, 128, 128),
}
ON_WORDS = {"on", "enable", "enabled", "start", "true", "yes", "activate"}
OFF_WORDS = {"off", "disable", "disabled", "stop", "false", "no", "deactivate", "mute"}
SETTER_VERBS = {"set", "turn", "change", "make", "switch", "put", "adjust", "mute", "raise", "lower"}
QUESTION_WORDS = {"what", "whats", "what's", "how", "is", "tell", "check", "status", "report"}
# Words that never identify a tool by themselves.
WEAK_WORDS = STOPWORDS | NUMBER_WORDS | {"self", "value", "current", "device", "level"}


@dataclass
class ToolMatch:
    tool: ToolSpec
    arguments: dict[str, Any]
    score: float
    matched: list[str]  # utterance words that matched the tool (for focusing a status answer)


def _norm(word: str) -> str:
    return SYNONYMS.get(word, word)


def _split_name(name: str) -> list[str]:
    name = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    return [w for w in re.split(r"[^A-Za-z0-9]+", name.lower()) if w]


def first_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text).strip()


def tool_keywords(tool: ToolSpec) -> tuple[set[str], set[str]]:
    name_words = {_norm(w) for w in _split_name(tool.name)} - {"self"}
    desc_words = {_norm(w) for w in tokens(first_sentence(tool.description))}
    desc_words |= {_norm(w) for w in tokens(tool.description)} & {"battery", "volume", "status", "network"}
    for prop in tool.properties:
        name_words |= {_norm(w) for w in _split_name(prop)}
    return name_words - WEAK_WORDS, desc_words - WEAK_WORDS


def vocabulary(tools: list[ToolSpec]) -> set[str]:
    vocab = set(NUMBER_WORDS) | set(COLOURS) | ON_WORDS | OFF_WORDS | set(SYNONYMS) | SETTER_VERBS
    vocab |= {"time", "date", "today", "name", "hello", "volume", "brightness", "theme"}
    for tool in tools:
        strong, weak = tool_keywords(tool)
        vocab |= strong | weak
    return vocab


def _word_hits(words: list[str], keywords: set[str]) -> list[str]:
    hits = []
    for word in words:
        if word in WEAK_WORDS or len(word) < 3:
            continue
        if word in keywords or any(len(k) >= 5 and fuzz.ratio(word, k) >= 88 for k in keywords):
            hits.append(word)
    return hits


def _colour_in(words: list[str]) -> str | None:
    return next((w for w in words if w in COLOURS), None)


def _string_value(words: list[str], prop: str) -> str | None:
    """The value for a string property: the words after the last "to"/"as"/"for"/"in"/"about",
    else the word after the property's name, else the word before "mode"."""
    positions = [i for i, w in enumerate(words) if w in ("to", "as", "for", "in", "about", "called", "named")]
    if positions:
        rest = [w for w in words[positions[-1] + 1 :] if w not in STOPWORDS]
        if rest:
            return " ".join(rest)
    prop_words = _split_name(prop)
    for i, word in enumerate(words):
        if word in prop_words and i + 1 < len(words) and words[i + 1] not in STOPWORDS:
            return words[i + 1]
    if "mode" in words:
        i = words.index("mode")
        if i > 0:
            return words[i - 1]
    return None


def _choices(tool: ToolSpec, schema: dict[str, Any]) -> list[str]:
    """Allowed values of a string property: its enum, else values the description quotes in backticks
    ("The theme can be `light` or `dark`"), which is how device tools document them."""
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return [str(v) for v in enum]
    quoted = re.findall(r"`([A-Za-z][A-Za-z0-9_-]*)`", tool.description)
    return [q for q in quoted if "." not in q and "_" not in q]


def extract_arguments(tool: ToolSpec, words: list[str]) -> dict[str, Any] | None:
    """Fill the tool's arguments from the words; None when a required argument cannot be found."""
    props = tool.properties
    args: dict[str, Any] = {}
    colour = _colour_in(words)
    rgb_keys = {k.lower(): k for k in props if k.lower() in ("r", "g", "b", "red", "green", "blue")}
    if colour and len(rgb_keys) == 3:
        r, g, b = COLOURS[colour]
        for key, value in zip(("r", "g", "b"), (r, g, b), strict=True):
            real = rgb_keys.get(key) or rgb_keys.get({"r": "red", "g": "green", "b": "blue"}[key])
            args[real] = value
    # Numbers: a property named in the request takes the number after its name ("speed twenty");
    # the remaining numbers fill required properties in order; an optional property (it has a
    # default) is never given a number it was not named for ("move the head to ninety").
    numbers = find_numbers(words)
    claimed: set[int] = set()
    named_values: dict[str, int] = {}
    for prop, schema in props.items():
        if not isinstance(schema, dict) or schema.get("type") not in ("integer", "number"):
            continue
        name_words = set(_split_name(prop))
        spots = [i for i, w in enumerate(words) if w in name_words]
        after = [(i, v) for i, v in numbers if spots and i > spots[0] and i not in claimed]
        if after:
            claimed.add(after[0][0])
            named_values[prop] = after[0][1]
    free = [v for i, v in numbers if i not in claimed]
    required_set = set(tool.required)
    for prop, schema in props.items():
        if prop in args or not isinstance(schema, dict):
            continue
        kind = schema.get("type")
        if kind in ("integer", "number"):
            value: Any = named_values.get(prop)
            if value is None and prop in required_set and free:
                value = free.pop(0)
            if value is None and prop in required_set:
                if any(w in words for w in ("max", "maximum", "full", "loudest")):
                    value = schema.get("maximum")
                elif any(w in words for w in ("min", "minimum", "mute", "silent")):
                    value = schema.get("minimum", 0)
            if value is not None:
                lo, hi = schema.get("minimum"), schema.get("maximum")
                if isinstance(lo, int | float):
                    value = max(value, lo)
                if isinstance(hi, int | float):
                    value = min(value, hi)
                args[prop] = int(value) if kind == "integer" else value
        elif kind == "boolean":
            if any(w in ON_WORDS for w in words):
                args[prop] = True
            elif any(w in OFF_WORDS for w in words):
                args[prop] = False
        elif kind == "string":
            if "colour" in prop.lower() or "color" in prop.lower():
                if colour:
                    args[prop] = colour
                continue
            choices = _choices(tool, schema)
            if choices:
                picked = next((c for c in choices if c.lower() in words), None)
                if picked is not None:
                    args[prop] = picked
                continue
            value = _string_value(words, prop)
            if value:
                args[prop] = value
    required = [r for r in tool.required if r in props]
    if any(r not in args for r in required):
        return None
    return args


def match_tool(text: str, tools: list[ToolSpec], min_score: float = 1.5) -> ToolMatch | None:
    """The best tool for the utterance, with its arguments, or None if nothing fits well enough."""
    if not tools:
        return None
    words = [_norm(w) for w in correct(tokens(text), vocabulary(tools))]
    is_setter = any(w in SETTER_VERBS for w in words) or find_number(words) is not None
    is_question = bool(words) and (words[0] in QUESTION_WORDS or "?" in text)
    best: ToolMatch | None = None
    for index, tool in enumerate(tools):
        strong, weak = tool_keywords(tool)
        strong_hits = _word_hits(words, strong)
        for schema in tool.properties.values():  # a documented value ("dark") names the tool too
            if isinstance(schema, dict) and schema.get("type") == "string":
                strong_hits += [c.lower() for c in _choices(tool, schema) if c.lower() in words]
        weak_hits = [w for w in _word_hits(words, weak) if w not in strong_hits]
        score = 2.0 * len(strong_hits) + 0.75 * len(weak_hits)
        if score == 0:
            continue
        name_words = set(_split_name(tool.name))
        if not strong_hits and name_words & {"set", "turn", "change", "reboot", "upgrade"}:
            continue  # a tool that changes something needs its own name in the request
        if is_setter and name_words & {"set", "turn", "change"}:
            score += 1.0
        if is_question and not is_setter and name_words & {"get", "status", "info", "state"}:
            score += 1.0
        if _colour_in(words) and (name_words & {"rgb", "colour", "color"}):
            score += 1.5
        args = extract_arguments(tool, words)
        if args is None:
            continue
        score -= index * 1e-6  # deterministic tie-break: router order (server tools first)
        if best is None or score > best.score:
            best = ToolMatch(tool, args, score, strong_hits + weak_hits)
    if best is None or best.score < min_score:
        return None
    return best
