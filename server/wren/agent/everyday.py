"""Everyday answers of the built-in engine that need no device: arithmetic, unit conversions, "repeat that",
and "stop" / "never mind".

Works on normalised words (`wren.agent.nlu.normalize_words`: numbers are digits, British spellings), so
"what's twelve times seven", "12 x 7" and "What is 12 times 7?" are one request. Arithmetic is evaluated by
a tiny precedence parser over numbers and operator words (never `eval`); at most `MAX_TERMS` numbers.
Units: length, mass, volume (kitchen measures are US cups and spoons; pints and gallons are imperial, as in
the UK), temperature and time. Each answer is one short sentence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MAX_TERMS = 8

_BINARY = {  # word(s) → operator; longest phrases first when matching
    ("multiplied", "by"): "*", ("divided", "by"): "/", ("to", "the", "power", "of"): "^",
    ("take", "away"): "-", ("plus",): "+", ("add",): "+", ("minus",): "-", ("less",): "-",
    ("times",): "*", ("x",): "*", ("over",): "/", ("+",): "+", ("-",): "-", ("*",): "*", ("/",): "/",
}
_SPOKEN_OP = {"+": "plus", "-": "minus", "*": "times", "/": "divided by", "^": "to the power of"}
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "^": 3}

# unit word → (dimension, factor to the base unit); temperature is handled apart.
_UNITS: dict[str, tuple[str, float]] = {}


def _unit(dimension: str, factor: float, *names: str) -> None:
    for name in names:
        _UNITS[name] = (dimension, factor)


_unit("length", 0.001, "millimetre", "millimetres", "mm")
_unit("length", 0.01, "centimetre", "centimetres", "cm")
_unit("length", 1.0, "metre", "metres", "m")
_unit("length", 1000.0, "kilometre", "kilometres", "km", "kilometer", "kilometers")
_unit("length", 0.0254, "inch", "inches")
_unit("length", 0.3048, "foot", "feet")
_unit("length", 0.9144, "yard", "yards")
_unit("length", 1609.344, "mile", "miles")
_unit("mass", 1.0, "gram", "grams", "g")
_unit("mass", 1000.0, "kilogram", "kilograms", "kilo", "kilos", "kg")
_unit("mass", 28.349523125, "ounce", "ounces", "oz")
_unit("mass", 453.59237, "pound", "pounds", "lb", "lbs")
_unit("mass", 6350.29318, "stone", "stones")
_unit("volume", 1.0, "millilitre", "millilitres", "ml")
_unit("volume", 1000.0, "litre", "litres", "l")
_unit("volume", 4.92892, "teaspoon", "teaspoons")
_unit("volume", 14.7868, "tablespoon", "tablespoons")
_unit("volume", 236.588, "cup", "cups")
_unit("volume", 568.261, "pint", "pints")
_unit("volume", 4546.09, "gallon", "gallons")
_unit("time", 1.0, "second", "seconds")
_unit("time", 60.0, "minute", "minutes")
_unit("time", 3600.0, "hour", "hours")
_unit("time", 86400.0, "day", "days")
_unit("time", 604800.0, "week", "weeks")
_TEMPERATURES = {"celsius": "C", "centigrade": "C", "fahrenheit": "F", "kelvin": "K"}
_UNIT_NAMES = {"C": "degrees Celsius", "F": "degrees Fahrenheit", "K": "kelvin"}

_REPEAT = ({"repeat", "that"}, {"say", "that", "again"}, {"what", "did", "you", "say"}, {"repeat", "please"},
           {"come", "again"}, {"pardon"}, {"sorry", "what"})
_STOP = {("stop",), ("cancel",), ("never", "mind"), ("nevermind",), ("be", "quiet"), ("quiet",),
         ("shut", "up"), ("that", "is", "enough"), ("enough",), ("forget", "it"), ("stop", "talking"),
         ("nothing",)}
_FILLER = {"please", "ok", "okay", "wren", "hey", "now", "just", "oh"}


def everyday_answer(words: Sequence[str], last_reply: str | None) -> str | None:
    """The answer, or None when the words are none of these requests."""
    core = [w for w in words if w not in _FILLER]
    if tuple(core) in _STOP:
        return "Okay."
    if any(group <= set(core) for group in _REPEAT) and len(core) <= 5:
        return f"I said: {last_reply}" if last_reply else "I haven't said anything yet."
    return _conversion(core) or _arithmetic(core)


# ---- numbers -------------------------------------------------------------------------------------------


def _number(word: str) -> float | None:
    try:
        value = float(word)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def spoken(value: float) -> str:
    """12.0 → "12", 2.5 → "2.5", 0.333333 → "0.333", 1234567.8 → "1234568"."""
    if abs(value - round(value)) < 1e-9:
        return str(round(value))
    digits = max(0, 2 - math.floor(math.log10(abs(value)))) if value else 0
    text = f"{value:.{min(digits, 6)}f}".rstrip("0").rstrip(".")
    return text or "0"


def _amount(words: Sequence[str]) -> tuple[float, int] | None:
    """A leading amount: "5", "1 and a half", "a", "an", "half a"; (value, words used)."""
    if not words:
        return None
    if words[0] in ("a", "an", "one"):
        return 1.0, 1
    if list(words[:2]) == ["half", "a"]:
        return 0.5, 2
    value = _number(words[0])
    if value is None:
        return None
    if list(words[1:4]) == ["and", "a", "half"]:
        return value + 0.5, 4
    return value, 1


# ---- unit conversions ----------------------------------------------------------------------------------


def _unit_of(word: str) -> tuple[str, float] | str | None:
    return _TEMPERATURES.get(word) or _UNITS.get(word)


def _conversion(words: list[str]) -> str | None:
    """ "convert 5 miles to kilometres", "5 kilos in pounds", "how many ounces in a pound",
    "what is 100 fahrenheit in celsius"."""
    if "how" in words and "many" in words:
        i = words.index("many")
        if i + 1 < len(words) and words[i + 1] in _UNITS and "in" in words[i + 2 :]:
            j = words.index("in", i + 2)
            amount = _amount(words[j + 1 :])
            if amount and j + 1 + amount[1] < len(words):
                return _convert(amount[0], words[j + 1 + amount[1]], words[i + 1])
        return None
    for k, word in enumerate(words):
        if word in ("in", "to", "into") and 0 < k < len(words) - 1:
            source, target = words[k - 1], words[k + 1]
            if _unit_of(source) and _unit_of(target):
                for start in range(k - 2, -1, -1):
                    amount = _amount(words[start : k - 1])
                    if amount and start + amount[1] == k - 1:
                        return _convert(amount[0], source, target)
    return None


def _convert(value: float, source: str, target: str) -> str | None:
    a, b = _unit_of(source), _unit_of(target)
    if isinstance(a, str) and isinstance(b, str):
        result = _temperature(value, a, b)
        return f"{spoken(value)} {_UNIT_NAMES[a]} is {spoken(result)} {_UNIT_NAMES[b]}."
    if not isinstance(a, tuple) or not isinstance(b, tuple):
        return None
    if a[0] != b[0]:
        return f"I can't convert {source} to {target}: one is a {a[0]}, the other a {b[0]}."
    result = value * a[1] / b[1]
    return f"{spoken(value)} {_plural(source, value)} is {spoken(result)} {_plural(target, result)}."


def _temperature(value: float, source: str, target: str) -> float:
    celsius = {"C": value, "F": (value - 32) * 5 / 9, "K": value - 273.15}[source]
    return {"C": celsius, "F": celsius * 9 / 5 + 32, "K": celsius + 273.15}[target]


def _plural(unit: str, value: float) -> str:
    """The unit word as people say it for this amount ("1 foot", "2 feet")."""
    singular = {"feet": "foot", "inches": "inch", "stones": "stone"}
    plural = {"foot": "feet", "inch": "inches"}
    base = singular.get(unit, unit[:-1] if unit.endswith("s") and unit[:-1] in _UNITS else unit)
    if len(base) <= 2:  # "km", "kg": say them as written
        return unit
    if abs(value - 1) < 1e-9:
        return base
    return plural.get(base, base if base.endswith("s") else base + "s")


# ---- arithmetic ----------------------------------------------------------------------------------------


def _arithmetic(words: list[str]) -> str | None:
    """ "what is 12 times 7", "15 minus 8", "10 percent of 250", "square root of 81", "7 squared"."""
    while words and words[0] in ("what", "is", "whats", "calculate", "compute", "how", "much", "tell", "me"):
        words = words[1:]
    words = [w for w in words if w != "equals"]
    if not words:
        return None
    if words[:3] == ["square", "root", "of"] and len(words) == 4 and _number(words[3]) is not None:
        value = _number(words[3]) or 0.0
        if value < 0:
            return "A negative number has no real square root."
        return f"The square root of {spoken(value)} is {spoken(math.sqrt(value))}."
    if len(words) == 4 and words[1:3] == ["percent", "of"]:
        a, b = _number(words[0]), _number(words[3])
        if a is not None and b is not None:
            return f"{spoken(a)} percent of {spoken(b)} is {spoken(a * b / 100)}."
    if len(words) == 2 and words[1] in ("squared", "cubed") and _number(words[0]) is not None:
        value = _number(words[0]) or 0.0
        power = 2 if words[1] == "squared" else 3
        return f"{spoken(value)} {words[1]} is {spoken(value**power)}."
    tokens = _tokens(words)
    if tokens is None:
        return None
    try:
        result = _evaluate(tokens)
    except ZeroDivisionError:
        return "I can't divide by zero."
    except OverflowError:
        return "That number is too big for me."
    said = " ".join(spoken(t) if isinstance(t, float) else _SPOKEN_OP[t] for t in tokens)
    return f"{said} is {spoken(result)}."


def _tokens(words: list[str]) -> list[float | str] | None:
    """Numbers and operators alternating, starting and ending with a number; None otherwise."""
    tokens: list[float | str] = []
    i = 0
    if words and words[0] == "minus" and len(words) > 1 and _number(words[1]) is not None:
        words = [f"-{words[1]}", *words[2:]]
    while i < len(words):
        expect_number = not tokens or isinstance(tokens[-1], str)
        if expect_number:
            value = _number(words[i])
            if value is None:
                return None
            tokens.append(value)
            i += 1
            continue
        for phrase, op in sorted(_BINARY.items(), key=lambda item: -len(item[0])):
            if tuple(words[i : i + len(phrase)]) == phrase:
                tokens.append(op)
                i += len(phrase)
                break
        else:
            return None
    numbers = [t for t in tokens if isinstance(t, float)]
    if len(numbers) < 2 or len(numbers) > MAX_TERMS or isinstance(tokens[-1], str):
        return None
    return tokens


def _evaluate(tokens: list[float | str]) -> float:
    """Precedence climbing over an alternating number/operator list (^ binds right)."""
    values: list[float] = []
    ops: list[str] = []

    def reduce() -> None:
        op, right, left = ops.pop(), values.pop(), values.pop()
        if op == "^" and abs(right) > 64:
            raise OverflowError
        values.append({"+": left + right, "-": left - right, "*": left * right,
                       "/": left / right if right else _divide_by_zero(), "^": left**right}[op])

    for token in tokens:
        if isinstance(token, float):
            values.append(token)
            continue
        while ops and (_PRECEDENCE[ops[-1]] > _PRECEDENCE[token]
                       or (_PRECEDENCE[ops[-1]] == _PRECEDENCE[token] and token != "^")):
            reduce()
        ops.append(token)
    while ops:
        reduce()
    return values[0]


def _divide_by_zero() -> float:
    raise ZeroDivisionError
