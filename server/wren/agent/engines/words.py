"""Text helpers for the builtin engine: tokens, ASR-slip correction and numbers.

Tokens are normalised text (`wren.agent.nlu.normalize`): lowercase, contractions expanded, spellings
folded, spoken numbers already digits. Recognisers slip ("volum"); tokens that are not known words are
snapped to the closest word in a vocabulary with rapidfuzz, but only when the match is strong and the
token is long enough that a real English word is unlikely to be bent into another one.
"""

from __future__ import annotations

from collections.abc import Iterable

from rapidfuzz import fuzz, process

from wren.agent.nlu import normalize_words
from wren.agent.nlu.numbers import NUMBER_WORDS as _SPELLED_NUMBERS

# Prepositions a recogniser often hears as numbers ("to" -> two, "for" -> four); after normalisation
# they are the digits 2 and 4.
_PREPOSITION_SLIPS = {"2", "4"}
NUMBER_WORDS = _SPELLED_NUMBERS | {"percent", "oh"}

# Common words never "corrected" (they are real words, e.g. "there" must not become "three").
STOPWORDS = {
    "a", "an", "the", "to", "of", "in", "on", "at", "is", "it", "its", "be", "by", "for", "and",
    "or", "but", "my", "me", "i", "am", "you", "your", "we", "our", "us", "what", "how",
    "which", "who", "whom", "when", "where", "why", "please", "can", "could", "would", "will", "do",
    "does", "did", "are", "was", "were", "there", "their", "these", "those", "this", "that", "then",
    "than", "them", "they", "with", "from", "up", "down", "set", "make", "turn", "change", "put", "get",
    "tell", "give", "show", "now", "current", "currently", "about", "all", "any", "some", "so", "very",
    "too", "also", "just", "hey", "hi", "hello", "ok", "okay", "thanks", "thank", "much", "should",
    "use", "tool", "tools", "first", "call", "if", "not", "no", "yes", "like", "want", "let",
    "into", "as", "only", "after", "before", "eg", "etc", "have", "has", "had",
    "right", "here", "other", "more", "less", "bit", "little", "need", "know", "one", "oh",
}


def tokens(text: str) -> list[str]:
    """Normalised tokens (bounded: see `wren.agent.nlu.normalize.MAX_WORDS`)."""
    return normalize_words(text)


def is_number(word: str) -> bool:
    return word.replace(".", "", 1).isdigit()


def correct(words: list[str], vocabulary: Iterable[str], cutoff: float = 80.0) -> list[str]:
    """Snap unknown tokens (>= 4 letters, not common words, no digits) to the closest vocabulary word."""
    vocab = vocabulary if isinstance(vocabulary, list) else sorted(set(vocabulary))
    known = set(vocab) | STOPWORDS
    out = []
    for word in words:
        if word in known or len(word) < 4 or any(c.isdigit() for c in word):
            out.append(word)
            continue
        best = process.extractOne(word, vocab, scorer=fuzz.ratio, score_cutoff=cutoff)
        out.append(best[0] if best else word)
    return out


def _value(word: str) -> int | float:
    value = float(word)
    return int(value) if "." not in word else value


def find_numbers(words: list[str]) -> list[tuple[int, int | float]]:
    """Every number in normalised tokens as (token index, value)."""
    found: list[tuple[int, int | float]] = []
    for i, word in enumerate(words):
        if not is_number(word):
            continue
        following = words[i + 1] if i + 1 < len(words) else ""
        if word in _PREPOSITION_SLIPS and is_number(following) and float(following) >= 10:
            continue  # "volume two thirty" is "volume to thirty" misheard, not the number 2
        found.append((i, _value(word)))
    return found


def find_number(words: list[str]) -> int | float | None:
    """The first number in the tokens, or None."""
    found = find_numbers(words)
    return found[0][1] if found else None
