"""Relative changes ("louder", "a bit dimmer", "turn it up", "turn the volume down by 5").

Pure helpers: understand the request, find the setter and a status getter among the tools, read the
current value from the getter's JSON answer, and compute the new value. The engine does the calls.

Rules: "a bit"/"a little"/"slightly" is a step of 10, anything else 20, "by N" is N; an explicit
target number ("turn it up to 80") is not relative (the absolute setter path handles it). The
quantity comes from the words ("louder" is volume, "dimmer" is brightness); a bare "turn it up" means
the volume. The new value is clamped to the property's minimum/maximum, else 0..100.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz, process

from wren.tools.spec import ToolSpec

SMALL_STEP = 10
STEP = 20
DEFAULT_CURRENT = 50  # assumed when no current value can be read (and the reply says so)
MAX_TOOLS = 256  # tools considered, as in the tool matcher

# word -> (quantity, direction); a direction-only word has quantity "".
_IMPLICIT = {
    "louder": ("volume", 1), "quieter": ("volume", -1), "softer": ("volume", -1),
    "brighter": ("brightness", 1), "dimmer": ("brightness", -1), "darker": ("brightness", -1),
    "dim": ("brightness", -1),
}
_UP = {"up", "raise", "increase", "higher", "boost", "more"}
_DOWN = {"down", "lower", "decrease", "reduce", "less"}
_QUANTITY_WORDS = {
    "volume": {"volume", "sound", "music", "audio", "speaker", "loudness", "loud", "quiet"},
    "brightness": {"brightness", "bright", "screen", "display", "backlight"},
}
_SMALL = {"bit", "little", "slightly", "touch", "tad"}
_VERBS_FOR_IT = {"turn", "crank", "bring", "push", "put", "make"}  # "turn it up" names no quantity


@dataclass(frozen=True)
class RelativeChange:
    quantity: str  # "volume" or "brightness"
    direction: int  # +1 or -1
    step: int


def _is_number(word: str) -> bool:
    return word.replace(".", "", 1).isdigit()


_KNOWN = sorted(set(_IMPLICIT) | _UP | _DOWN | set().union(*_QUANTITY_WORDS.values()))


def _snap(word: str) -> str:
    """A slip of one of this module's words ("volum", "loudr") to that word; others unchanged."""
    if len(word) < 4 or word in _KNOWN:
        return word
    best = process.extractOne(word, _KNOWN, scorer=fuzz.ratio, score_cutoff=85)
    return best[0] if best else word


def parse_relative_change(words: list[str]) -> RelativeChange | None:
    """The relative change normalised words ask for, or None."""
    words = [_snap(w) for w in words]
    quantity, direction = "", 0
    for word in words:
        if word in _IMPLICIT:
            quantity, direction = _IMPLICIT[word]
            break
        if word in _UP or word in _DOWN:
            direction = direction or (1 if word in _UP else -1)
    if not direction:
        return None
    if not quantity:
        quantity = next((q for q, names in _QUANTITY_WORDS.items() if set(words) & names), "")
    if not quantity:
        if not (set(words) & _VERBS_FOR_IT and "it" in words):
            return None  # "turn up the heat" names something else
        quantity = "volume"
    step = SMALL_STEP if set(words) & _SMALL else STEP
    for i, word in enumerate(words):
        if _is_number(word):
            if i > 0 and words[i - 1] == "by":
                step = max(1, int(float(word)))
            else:
                return None  # "turn it up to 80" is an absolute setting
    return RelativeChange(quantity, direction, step)


def _name_words(name: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", name.lower()) if w}


def find_setter(tools: list[ToolSpec], quantity: str) -> tuple[ToolSpec, str] | None:
    """A setter tool for the quantity and its numeric property ("self.audio_speaker.set_volume",
    "volume"): its name says set/change and the quantity, and that property is a number."""
    for tool in tools[:MAX_TOOLS]:
        words = _name_words(tool.name)
        if not words & {"set", "change", "adjust"} or quantity not in " ".join(sorted(words)):
            continue
        numeric = [p for p, s in tool.properties.items() if isinstance(s, dict)
                   and s.get("type") in ("integer", "number")]
        named = [p for p in numeric if quantity in p.lower()] or numeric
        other_required = [r for r in tool.required if r not in named[:1]]
        if named and not other_required:
            return tool, named[0]
    return None


def find_getter(tools: list[ToolSpec], quantity: str) -> ToolSpec | None:
    """A tool that reads state without arguments: a getter for the quantity, else a status tool."""
    readers = [
        t for t in tools[:MAX_TOOLS]
        if not t.required and _name_words(t.name) & {"get", "status", "state", "info"}
        and not _name_words(t.name) & {"set", "change", "turn"}
    ]
    return next((t for t in readers if quantity in t.name.lower()), None) or (readers[0] if readers else None)


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        pairs: list[tuple[str, Any]] = []
        for key, inner in list(value.items())[:256]:
            pairs += _flatten(inner, f"{prefix} {key}".strip())
        return pairs
    return [(prefix.lower(), value)]


def read_value(text: str, quantity: str) -> float | None:
    """The quantity's current value in a getter's answer: a bare number, or the first JSON field
    whose path names the quantity ({"audio_speaker": {"volume": 70}} -> 70)."""
    stripped = text.strip()[:20000]
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    if isinstance(data, bool):
        return None
    if isinstance(data, int | float):
        return float(data)
    for key, value in _flatten(data):
        if quantity in key and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def new_value(current: float, change: RelativeChange, schema: dict[str, Any]) -> int:
    """current +/- step, clamped to the schema's minimum/maximum (else 0..100)."""
    lo, hi = schema.get("minimum", 0), schema.get("maximum", 100)
    lo = lo if isinstance(lo, int | float) else 0
    hi = hi if isinstance(hi, int | float) else 100
    return round(min(max(current + change.direction * change.step, lo), hi))
