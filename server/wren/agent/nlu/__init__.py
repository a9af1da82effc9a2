"""Understanding what people say: text normalisation, spoken numbers, sound-alike keys, the fixed
intents' tolerant matching and relative changes. Pure functions, no I/O (docs/agent.md,
"Understanding what people say")."""

from wren.agent.nlu.fixed import (
    CANCEL,
    Guess,
    clarifying_question,
    exact_intent,
    fuzzy_intent,
    resolve_clarification,
)
from wren.agent.nlu.normalize import MAX_WORDS, fold_words, normalize, normalize_words
from wren.agent.nlu.numbers import number_value, spoken_numbers_to_digits
from wren.agent.nlu.phonetic import phonetic_key, phonetic_string
from wren.agent.nlu.relative import RelativeChange, parse_relative_change

__all__ = [
    "CANCEL",
    "MAX_WORDS",
    "Guess",
    "RelativeChange",
    "clarifying_question",
    "exact_intent",
    "fold_words",
    "fuzzy_intent",
    "normalize",
    "normalize_words",
    "number_value",
    "parse_relative_change",
    "phonetic_key",
    "phonetic_string",
    "resolve_clarification",
    "spoken_numbers_to_digits",
]
