"""One canonical text for matching, whatever the recogniser (or the keyboard) wrote.

`normalize("Set the volume to Seventy-Five%.")` == `normalize("set the volume to 75 percent")`
== "set the volume to 75 percent". Steps, in order (docs/agent.md, "Understanding what people say"):

1. Bound the input: the first 2048 characters are read, and at most 64 words / 512 characters are
   kept, so a 60 KB message costs the same as a sentence.
2. Lowercase; accents stripped ("café" -> "cafe"); curly quotes made straight.
3. Punctuation folded to spaces, except a decimal point or a time colon between digits ("2.5",
   "3:30"); "1,000" -> "1000"; "%" -> " percent", "per cent" -> "percent", "&" -> " and ",
   "°" -> " degrees", "a.m."/"p.m." -> "am"/"pm".
4. Contractions expanded ("what's" -> "what is", "don't" -> "do not", "i'm" -> "i am", "let's" ->
   "let us", also without the apostrophe: "whats", "dont"); "o'clock" -> "oclock"; a possessive "'s"
   is dropped ("today's date" -> "today date").
5. British/US spellings folded to the British form (`spelling.py`).
6. Spelled numbers to digits (`numbers.py`), after fixing the commonest number slips ("thirdy",
   "fourty").

Pure functions, no I/O.
"""

from __future__ import annotations

import re
import unicodedata

from wren.agent.nlu.numbers import NUMBER_WORDS, TENS, spoken_numbers_to_digits
from wren.agent.nlu.spelling import expand_contraction, fold_spelling

MAX_RAW_CHARS = 2048
MAX_WORDS = 64
MAX_CHARS = 512

_QUOTES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'", "\u00b4": "'"})
_SYMBOLS = (("%", " percent "), ("&", " and "), ("\u00b0", " degrees "))
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_AM_PM = re.compile(r"\b([ap])\.m\b\.?")
_DECIMAL_POINT = re.compile(r"(?<=\d)\.(?=\d)")
_TIME_COLON = re.compile(r"(?<=\d):(?=\d\d\b)")
_NON_WORD = re.compile(r"[^a-z0-9'\x00\x01]+")
# Slips a recogniser or a hurried typist makes on number words; "-dy" for "-ty" is handled generally.
_NUMBER_SLIPS = {"fourty": "forty", "ninty": "ninety", "tweny": "twenty", "fivety": "fifty"}


def _fix_number_slip(word: str) -> str:
    if word in NUMBER_WORDS:
        return word
    if word.endswith("dy") and word[:-2] + "ty" in TENS:
        return word[:-2] + "ty"  # "thirdy" -> "thirty"
    return _NUMBER_SLIPS.get(word, word)


def _plain(text: str) -> str:
    text = text[:MAX_RAW_CHARS].translate(_QUOTES)
    if not text.isascii():
        decomposed = unicodedata.normalize("NFKD", text)
        text = "".join(c for c in decomposed if not unicodedata.combining(c))
    text = text.lower()
    text = _THOUSANDS.sub("", text)
    text = _AM_PM.sub(r"\1m", text)
    for symbol, words in _SYMBOLS:
        text = text.replace(symbol, words)
    text = _DECIMAL_POINT.sub("\x00", text)  # protected from the punctuation fold
    text = _TIME_COLON.sub("\x01", text)
    return _NON_WORD.sub(" ", text)


def fold_words(text: str) -> list[str]:
    """Steps 1-5: lowercase, folded words (numbers still as written), bounded."""
    words: list[str] = []
    length = 0
    for raw in _plain(text).split():
        raw = raw.strip("'")
        if not raw:
            continue
        for word in expand_contraction(raw).split():
            word = fold_spelling(_fix_number_slip(word.replace("\x00", ".").replace("\x01", ":")))
            if word == "cent" and words and words[-1] == "per":
                words[-1] = "percent"
                continue
            length += len(word) + 1
            if len(words) >= MAX_WORDS or length > MAX_CHARS + 1:
                return words
            words.append(word)
    return words


def normalize_words(text: str) -> list[str]:
    """The normalised tokens of a text (see `normalize`)."""
    return spoken_numbers_to_digits(fold_words(text))


def normalize(text: str) -> str:
    """The canonical text used for matching (see the module docstring)."""
    return " ".join(normalize_words(text))
