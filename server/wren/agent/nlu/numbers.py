"""Spelled numbers to digits, on lowercase word tokens.

Rules (docs/agent.md, "Understanding what people say"):

- Compounds follow English number grammar: "seventy five" -> 75, "one hundred and twenty" -> 120,
  "a hundred" -> 100, "two thousand and five" -> 2005, "nineteen hundred" -> 1900. Words that cannot
  continue a number end it, so "two thirty" is 2 then 30 and "two three" is 2 then 3.
- "point" after a number starts decimals read digit by digit: "two point five" -> 2.5.
- Digit strings: three or more single-digit words, or two with a "zero"/"oh" among them, are read
  digit by digit ("one oh one" -> 101). "oh" is zero only there; anywhere else it stays a word.
- "one" stays a word where it is a pronoun: after a determiner ("the one in the kitchen", "this one")
  or before "of"/"by"/"another" ("one of the lights"), unless a larger number follows ("the one hundred").
- Ordinals become "30th", "21st", "4th". "first", "second" and "third" are everyday words ("first
  call...", "wait a second", "a third"), so alone they become ordinals only next to a month name
  ("march first", "the third of may"); inside a compound ("twenty first") "first"/"third" always do,
  and "second" only next to a month, because "a twenty second timer" is 20 seconds.
- "to", "too" and "for" are never numbers; a digit token followed by a scale word is multiplied
  ("5 thousand" -> 5000). Numbers already written as digits are left as they are.
"""

from __future__ import annotations

UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9,
}
TEENS = {
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}
SCALES = {"thousand": 1000, "million": 1_000_000, "billion": 1_000_000_000}
ORDINAL_UNITS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9,
}
ORDINAL_TEENS = {
    "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14, "fifteenth": 15,
    "sixteenth": 16, "seventeenth": 17, "eighteenth": 18, "nineteenth": 19,
}
ORDINAL_TENS = {
    "twentieth": 20, "thirtieth": 30, "fortieth": 40, "fiftieth": 50, "sixtieth": 60, "seventieth": 70,
    "eightieth": 80, "ninetieth": 90,
}
ORDINAL_SCALES = {"hundredth": 100, "thousandth": 1000, "millionth": 1_000_000}
MONTHS = {
    "january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
    "november", "december",
}
NUMBER_WORDS = (
    set(UNITS) | set(TEENS) | set(TENS) | set(SCALES) | {"hundred"} | set(ORDINAL_UNITS)
    | set(ORDINAL_TEENS) | set(ORDINAL_TENS) | set(ORDINAL_SCALES)
)
_EVERYDAY_ORDINALS = {"first", "second", "third"}
_PRONOUN_BEFORE = {
    "the", "this", "that", "which", "any", "each", "every", "no", "some", "another", "other", "last",
    "next", "same", "new", "old", "big", "small", "little", "right", "left", "wrong", "only", "first",
    "second", "third",
}
_PRONOUN_AFTER = {"of", "by", "another"}
_DIGIT_WORDS = {**UNITS, "oh": 0}


def ordinal_suffix(value: int) -> str:
    if 10 <= value % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(value % 10, "th")


def _at(words: list[str], i: int) -> str:
    return words[i] if 0 <= i < len(words) else ""


def _is_digits(word: str) -> bool:
    return word.replace(".", "", 1).isdigit()


def _month_near(words: list[str], start: int, end: int) -> bool:
    """A month name just before the number, or "of <month>" just after it ("the first of may")."""
    return _at(words, start - 1) in MONTHS or (_at(words, end) == "of" and _at(words, end + 1) in MONTHS)


def _digit_string(words: list[str], i: int) -> tuple[str, int] | None:
    """ "one oh one" -> ("101", end): a run read digit by digit, or None if it is not one."""
    if words[i] not in UNITS:
        return None
    end = i
    while end < len(words) and words[end] in _DIGIT_WORDS:
        end += 1
    while end > i and words[end - 1] == "oh":  # a trailing "oh" is an exclamation, not a zero
        end -= 1
    run = words[i:end]
    if len(run) >= 3 or (len(run) == 2 and ({"oh", "zero"} & set(run))):
        if words[end:end + 1] and words[end] in ("hundred", *SCALES, "point"):
            return None  # "two five hundred": leave it to the compound reading
        return "".join(str(_DIGIT_WORDS[w]) for w in run), end
    return None


def _compound(words: list[str], i: int) -> tuple[str, int] | None:
    """Parse a spelled number starting at i: (digits, end index) or None."""
    total, current, last = 0, 0, ""  # last: what the previous word was, to check the grammar
    scale_cap = 10**12
    seen = False
    ordinal = False
    j = i
    if words[j] == "a" and _at(words, j + 1) in ("hundred", *SCALES):
        current, last, seen, j = 1, "unit", True, j + 1
    while j < len(words):
        word = words[j]
        if word in UNITS or word in ORDINAL_UNITS:
            value = UNITS.get(word, ORDINAL_UNITS.get(word, 0))
            if last not in ("", "tens", "hundred", "scale", "and"):
                break
            if word in ORDINAL_UNITS and word in _EVERYDAY_ORDINALS:
                standalone = last in ("", "and")
                if (word == "second" or standalone) and not _month_near(words, i, j + 1):
                    break
            current += value
            last = "unit"
        elif word in TEENS or word in ORDINAL_TEENS:
            if last not in ("", "hundred", "scale", "and"):
                break
            current += TEENS.get(word, ORDINAL_TEENS.get(word, 0))
            last = "teen"
        elif word in TENS or word in ORDINAL_TENS:
            if last not in ("", "hundred", "scale", "and"):
                break
            current += TENS.get(word, ORDINAL_TENS.get(word, 0))
            last = "tens"
        elif word in ("hundred", "hundredth"):
            if last not in ("", "unit", "teen"):
                break
            current = (current or 1) * 100
            last = "hundred"
        elif word in SCALES or word in ORDINAL_SCALES:
            scale = SCALES.get(word, ORDINAL_SCALES.get(word, 0))
            if last in ("scale", "and") or scale >= scale_cap:
                break
            total += (current or 1) * scale
            current, scale_cap, last = 0, scale, "scale"
        elif word == "and" and last in ("hundred", "scale"):
            following = _at(words, j + 1)
            if following not in UNITS and following not in TEENS and following not in TENS:
                break
            last = "and"
            j += 1
            continue
        else:
            break
        seen = True
        j += 1
        if word in ORDINAL_UNITS or word in ORDINAL_TEENS or word in ORDINAL_TENS or word in ORDINAL_SCALES:
            ordinal = True
            break
    if not seen:
        return None
    value = total + current
    if ordinal:
        return f"{value}{ordinal_suffix(value)}", j
    if _at(words, j) == "point" and _at(words, j + 1) in _DIGIT_WORDS:
        decimals = ""
        j += 1
        while j < len(words) and words[j] in _DIGIT_WORDS:
            decimals += str(_DIGIT_WORDS[words[j]])
            j += 1
        return f"{value}.{decimals}", j
    return str(value), j


def _starts_number(words: list[str], i: int) -> bool:
    word = words[i]
    if word == "a":
        return _at(words, i + 1) in ("hundred", *SCALES)
    if word == "one":
        following = _at(words, i + 1)
        if following in ("hundred", "point", *SCALES):
            return True
        return _at(words, i - 1) not in _PRONOUN_BEFORE and following not in _PRONOUN_AFTER
    return word in NUMBER_WORDS and word not in ORDINAL_SCALES  # "hundred percent" is 100 too


def spoken_numbers_to_digits(words: list[str]) -> list[str]:
    """Replace spelled numbers in lowercase tokens by digits (see the module rules)."""
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if _is_digits(word) and _at(words, i + 1) in ("hundred", *SCALES):
            factor = 100 if words[i + 1] == "hundred" else SCALES[words[i + 1]]
            product = float(word) * factor
            out.append(str(int(product)) if product.is_integer() else f"{product:g}")
            i += 2
            continue
        if _starts_number(words, i):
            parsed = _digit_string(words, i) or _compound(words, i)
            if parsed is not None:
                out.append(parsed[0])
                i = parsed[1]
                continue
        out.append(word)
        i += 1
    return out


def number_value(text: str) -> int | float | None:
    """The value of one number written any way: "75", "75%", "2.5", "seventy five", "a hundred"."""
    words = text.lower().replace("%", " ").replace("-", " ").replace(",", "").split()
    words = [w for w in spoken_numbers_to_digits(words) if w != "percent"]
    if len(words) != 1 or not _is_digits(words[0]):
        return None
    value = float(words[0])
    return int(value) if value.is_integer() and "." not in words[0] else value
