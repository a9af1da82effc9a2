"""Pick a tool for an utterance and fill its arguments, from tool names, descriptions and schemas.

Generic on purpose: nothing here knows a particular device. A tool scores by the utterance words
that match its name (strong) and its description's first sentence (weak), with small nudges for the
verb (`set`/`turn` prefer setters, questions prefer getters). Arguments come from the schema:
integers from spoken numbers, booleans from on/off words, colours for r/g/b or colour properties,
strings from the words after "to". A tool is chosen only if its required arguments can be filled.

Works on normalised text (`wren.agent.nlu`), so "seventy-five percent", "75%" and "colour"/"color" are
the same to it. Bounded: at most MAX_TOOLS tools, MAX_PROPERTIES properties a tool and MAX_KEYWORDS
keywords a tool are considered, and the utterance is capped by the normaliser, so a huge message or a
device listing thousands of properties costs a bounded time (callers still run it off the event loop).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz, process

from wren.agent.engines.words import NUMBER_WORDS, STOPWORDS, correct, find_number, find_numbers, is_number
from wren.agent.nlu import normalize_words, spoken_numbers_to_digits
from wren.agent.nlu.normalize import MAX_RAW_CHARS
from wren.agent.nlu.spelling import fold_spelling
from wren.tools.spec import ToolSpec

MAX_TOOLS = 256
MAX_PROPERTIES = 32
MAX_KEYWORDS = 64
MAX_DESCRIPTION_CHARS = 2000

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
    "on": (255, 255, 255), "black": (0, 0, 0), "violet": (143, 0, 255), "teal": (0, 128, 128),
    "grey": (128, 128, 128),
}
ON_WORDS = {"on", "enable", "enabled", "start", "true", "yes", "activate"}
OFF_WORDS = {"off", "disable", "disabled", "stop", "false", "no", "deactivate", "mute"}
# A tool whose name says which way it switches ("lamp.turn_on"): the request must say the same.
_NAME_ON = {"on", "enable", "start", "open", "activate"}
_NAME_OFF = {"off", "disable", "stop", "close", "deactivate"}
SETTER_VERBS = {"set", "turn", "change", "make", "switch", "put", "adjust", "mute", "raise", "lower"}
QUESTION_WORDS = {"what", "how", "is", "are", "tell", "check", "status", "report", "which", "does"}
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
    name = re.sub(r"([a-z])([A-Z])", r"\1 \2", name[:200])
    return [fold_spelling(w) for w in re.split(r"[^A-Za-z0-9]+", name.lower()) if w]


def first_sentence(text: str) -> str:
    text = " ".join(text[:MAX_DESCRIPTION_CHARS].split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return (match.group(1) if match else text).strip()


def _properties(tool: ToolSpec) -> dict[str, dict[str, Any]]:
    """The properties considered (the first MAX_PROPERTIES)."""
    props = tool.properties
    return props if len(props) <= MAX_PROPERTIES else dict(list(props.items())[:MAX_PROPERTIES])


@dataclass(frozen=True)
class _ToolIndex:
    strong: frozenset[str]  # name and property words
    weak: frozenset[str]  # description words
    name_words: frozenset[str]
    choices: frozenset[str]  # documented string values ("light", "dark"), lowercase


# Keyed by id(tool) and holding the tool, so a recycled id is noticed; tool lists rarely change.
_INDEX_CACHE: dict[int, tuple[ToolSpec, _ToolIndex]] = {}


def _keywords(words: list[str]) -> frozenset[str]:
    """The first MAX_KEYWORDS distinct words that can identify a tool, in order."""
    kept = [w for w in dict.fromkeys(words) if w not in WEAK_WORDS and w != "self"]
    return frozenset(kept[:MAX_KEYWORDS])


def _index(tool: ToolSpec) -> _ToolIndex:
    cached = _INDEX_CACHE.get(id(tool))
    if cached is not None and cached[0] is tool:
        return cached[1]
    name_words = _split_name(tool.name)
    strong = [_norm(w) for w in name_words]  # the name's words first: they survive the keyword cap
    weak = [_norm(w) for w in normalize_words(first_sentence(tool.description))]
    weak += [w for w in normalize_words(tool.description[:MAX_DESCRIPTION_CHARS])
             if w in ("battery", "volume", "status", "network")]
    choices: set[str] = set()
    for prop, schema in _properties(tool).items():
        strong += [_norm(w) for w in _split_name(prop)]
        if isinstance(schema, dict) and schema.get("type") == "string":
            choices |= {c.lower() for c in _choices(tool, schema)}
    index = _ToolIndex(_keywords(strong), _keywords(weak), frozenset(name_words), frozenset(choices))
    if len(_INDEX_CACHE) > 4 * MAX_TOOLS:
        _INDEX_CACHE.clear()
    _INDEX_CACHE[id(tool)] = (tool, index)
    return index


def tool_keywords(tool: ToolSpec) -> tuple[set[str], set[str]]:
    index = _index(tool)
    return set(index.strong), set(index.weak)


def vocabulary(tools: list[ToolSpec]) -> set[str]:
    vocab = set(NUMBER_WORDS) | set(COLOURS) | ON_WORDS | OFF_WORDS | set(SYNONYMS) | SETTER_VERBS
    vocab |= {"time", "date", "today", "name", "hello", "volume", "brightness", "theme"}
    for tool in tools[:MAX_TOOLS]:
        index = _index(tool)
        vocab |= index.strong | index.weak | index.choices
    return vocab


def _close_keywords(words: list[str], vocab: list[str]) -> dict[str, set[str]]:
    """For each content word, the keywords it matches: itself, or a keyword of >= 5 letters within
    rapidfuzz ratio 88 (computed once per utterance, not once per tool)."""
    close: dict[str, set[str]] = {}
    for word in set(words):
        if word in WEAK_WORDS or len(word) < 3 or is_number(word):
            continue
        close[word] = {word}
        if len(word) >= 4:  # a shorter word cannot be within ratio 88 of a 5-letter keyword
            found = process.extract(word, vocab, scorer=fuzz.ratio, score_cutoff=88, limit=None)
            close[word] |= {k for k, _score, _i in found if len(k) >= 5}
    return close


def _word_hits(words: list[str], keywords: frozenset[str], close: dict[str, set[str]]) -> list[str]:
    return [w for w in words if w in close and not close[w].isdisjoint(keywords)]


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
    quoted = re.findall(r"`([A-Za-z][A-Za-z0-9_-]*)`", tool.description[:MAX_DESCRIPTION_CHARS])
    return [q for q in quoted if "." not in q and "_" not in q]


def extract_arguments(tool: ToolSpec, words: list[str]) -> dict[str, Any] | None:
    """Fill the tool's arguments from the words; None when a required argument cannot be found."""
    props = _properties(tool)
    if any(r not in props for r in tool.required):
        return None  # a required property beyond the ones considered: cannot be filled safely
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


def _utterance_words(text: str, vocab: list[str]) -> list[str]:
    words = correct(normalize_words(text), vocab)
    # A corrected slip may be a number word ("thirtee" -> "thirty"): read numbers once more.
    return [_norm(w) for w in spoken_numbers_to_digits(words)]


def _polarity(words: set[str] | frozenset[str], on: set[str], off: set[str]) -> str:
    return "on" if words & on else "off" if words & off else ""


def match_tool(text: str, tools: list[ToolSpec], min_score: float = 1.5) -> ToolMatch | None:
    """The best tool for the utterance (raw or normalised text), with its arguments, or None if
    nothing fits well enough. CPU-bound and bounded: run it off the event loop."""
    tools = tools[:MAX_TOOLS]
    if not tools:
        return None
    vocab = sorted(vocabulary(tools))
    words = _utterance_words(text, vocab)
    close = _close_keywords(words, vocab)
    said = set(words)
    is_setter = any(w in SETTER_VERBS for w in words) or find_number(words) is not None
    is_question = bool(words) and (words[0] in QUESTION_WORDS or "?" in text[:MAX_RAW_CHARS])
    said_polarity = _polarity(said, ON_WORDS, OFF_WORDS)
    best: ToolMatch | None = None
    for index, tool in enumerate(tools):
        tool_index = _index(tool)
        strong_hits = _word_hits(words, tool_index.strong, close)
        strong_hits += sorted(tool_index.choices & said)  # a documented value ("dark") names the tool too
        name_polarity = _polarity(tool_index.name_words, _NAME_ON, _NAME_OFF)
        if name_polarity:
            if name_polarity != said_polarity:
                continue  # lamp.turn_on needs "on" said ("on on the lamp" is a slip of "turn on")
            strong_hits.append(name_polarity)
        weak_hits = [w for w in _word_hits(words, tool_index.weak, close) if w not in strong_hits]
        score = 2.0 * len(strong_hits) + 0.75 * len(weak_hits)
        if score == 0:
            continue
        name_words = tool_index.name_words
        if not strong_hits and name_words & {"set", "turn", "change", "reboot", "upgrade"}:
            continue  # a tool that changes something needs its own name in the request
        if is_setter and name_words & {"set", "turn", "change"}:
            score += 1.0
        if is_question and not is_setter and name_words & {"get", "status", "info", "state"}:
            score += 1.0
        if _colour_in(words) and (name_words & {"rgb", "colour"}):
            score += 1.5
        score -= index * 1e-6  # deterministic tie-break: router order (server tools first)
        if best is not None and score <= best.score:
            continue
        args = extract_arguments(tool, words)
        if args is None:
            continue
        best = ToolMatch(tool, args, score, strong_hits + weak_hits)
    if best is None or best.score < min_score:
        return None
    return best
