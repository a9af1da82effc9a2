"""Text helpers for the builtin engine: tokens, ASR-slip correction and spoken numbers.

Recognisers slip ("thirdy", "volum"); tokens that are not known words are snapped to the closest
word in a vocabulary with rapidfuzz, but only when the match is strong and the token is long enough
that a real English word is unlikely to be bent into another one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rapidfuzz import fuzz, process

UNITS = {
    "zero": 0, "oh": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
}
TENS = {
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80,
    "ninety": 90,
}
# Prepositions a recogniser often hears as numbers ("to" -> two, "for" -> four).
_PREPOSITION_SLIPS = {"two", "four"}
NUMBER_WORDS = set(UNITS) | set(TENS) | {"hundred", "thousand", "percent"}

# Common words never "corrected" (they are real words, e.g. "there" must not become "three").
STOPWORDS = {
    "a", "an", "the", "to", "of", "in", "on", "at", "is", "it", "its", "it's", "be", "by", "for", "and",
    "or", "but", "my", "me", "i", "you", "your", "we", "our", "us", "what", "whats", "what's", "how",
    "which", "who", "whom", "when", "where", "why", "please", "can", "could", "would", "will", "do",
    "does", "did", "are", "was", "were", "there", "their", "these", "those", "this", "that", "then",
    "than", "them", "they", "with", "from", "up", "down", "set", "make", "turn", "change", "put", "get",
    "tell", "give", "show", "now", "current", "currently", "about", "all", "any", "some", "so", "very",
    "too", "also", "just", "hey", "hi", "hello", "ok", "okay", "thanks", "thank", "much", "should",
    "use", "tool", "tools", "first", "call", "if", "not", "no", "yes", "like", "want", "let",
    "lets", "let's", "into", "as", "only", "after", "before", "e.g", "etc", "have", "has", "had",
    "right", "here", "other", "more", "less", "bit", "little", "need", "know",
}

_TOKEN_RE = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def tokens(text: str) -> list[str]:
    text = text.lower().replace("-", " ").replace("%", " percent ")
    return _TOKEN_RE.findall(text)


def correct(words: list[str], vocabulary: Iterable[str], cutoff: float = 80.0) -> list[str]:
    """Snap unknown tokens (>= 4 letters, not common words) to the closest vocabulary word."""
    vocab = sorted(set(vocabulary))
    known = set(vocab) | STOPWORDS
    out = []
    for word in words:
        if word in known or len(word) < 4 or word.isdigit():
            out.append(word)
            continue
        best = process.extractOne(word, vocab, scorer=fuzz.ratio, score_cutoff=cutoff)
        out.append(best[0] if best else word)
    return out


def find_numbers(words: list[str]) -> list[tuple[int, int]]:
    """Every number in the tokens as (token index, value): digits ("30") or spoken ("thirty five",
    "one hundred", "a hundred")."""
    found: list[tuple[int, int]] = []
    i = 0
    while i < len(words):
        word = words[i]
        following = _next(words, i) or ""
        if word in _PREPOSITION_SLIPS and (following in TENS or following.isdigit()):
            i += 1  # "volume two thirty" is "volume to thirty" misheard, not the number 2
            continue
        if word.isdigit():
            found.append((i, int(word)))
        elif word in UNITS or word in TENS or (word in ("a", "one") and _next(words, i) == "hundred"):
            value, end = _parse_spoken(words, i)
            if value is not None:
                found.append((i, value))
                i = end
                continue
        i += 1
    return found


def find_number(words: list[str]) -> int | None:
    """The first number in the tokens, or None."""
    found = find_numbers(words)
    return found[0][1] if found else None


def _next(words: list[str], i: int) -> str | None:
    return words[i + 1] if i + 1 < len(words) else None


def _parse_spoken(words: list[str], i: int) -> tuple[int | None, int]:
    total = 0
    current = 0
    seen = False
    while i < len(words):
        word = words[i]
        if word == "a" and _next(words, i) == "hundred":
            current += 1
        elif word in UNITS:
            if seen and current % 10 != 0 and current < 100:
                break  # "two three" is two numbers; stop at the first
            current += UNITS[word]
        elif word in TENS:
            if seen and current % 100 != 0:
                break
            current += TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        elif word == "thousand":
            total += max(current, 1) * 1000
            current = 0
        elif word == "and" and seen:
            pass
        else:
            break
        seen = True
        i += 1
    return (total + current if seen else None), i
