"""The builtin engine's fixed intents (name, time, date, ...): exact patterns first, then a tolerant
sound-alike match for recogniser slips, and a clarifying question when two intents are too close.

Everything here works on normalised text (`normalize.py`). The tolerant match compares the whole
utterance, with leading/trailing filler ("please", "can you", "hey wren") removed, against a few
phrasings per intent: score = 0.4 x character similarity + 0.6 x sound-alike similarity (both
rapidfuzz ratios, 0..100). Sound-alike keys forgive "that they" for "the date"; characters forgive
"main" for "name". A guess needs score >= ACCEPT, about the same number of words and sounds as the
phrasing (so a longer, different sentence never matches), and a lead of CLARIFY_MARGIN over the best
other intent; when another intent is within CLARIFY_MARGIN the engine asks which one was meant. A
rejection class of everyday sentences (OTHER) competes too: when one of them is within OTHER_MARGIN
of the best intent, nothing is guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rapidfuzz import fuzz

from wren.agent.nlu.phonetic import phonetic_key, phonetic_string

ACCEPT = 80.0
OTHER_MARGIN = 4.0  # a lead this big over the everyday-sentence class is needed to guess
CLARIFY_MARGIN = 8.0  # two intents closer than this: ask which one
MAX_FUZZY_WORDS = 8  # longer utterances are not guessed at: they are rarely a slip of a short command
MAX_ANSWER_WORDS = 4  # "the date", "the first one", "what time it is": longer is a new request
CANCEL = "cancel"
OTHER = "other"

# Checked before tools, in this order.
_PRIMARY: list[tuple[str, re.Pattern[str]]] = [
    ("ask_name", re.compile(
        r"\b(what is my name|who am i|do you (?:know|remember) my name|what am i called|tell me my name"
        r"|say my name)\b")),
    ("assistant_name", re.compile(
        r"\b(what is your name|who are you|what are you called|what should i call you)\b")),
    ("capability", re.compile(
        r"\b(what can you do|what do you do|what are you able to do|what can i ask|help me|help"
        r"|your (?:skills|abilities|features|capabilities)|what tools)\b")),
    ("time", re.compile(r"\b(what time|the time|time is it|current time)\b")),
    ("date", re.compile(
        r"\b(what is the date|today date|the date|what day|which day|day is it|day is today"
        r"|date today)\b")),
]
# Checked after tools: "thanks, and set the volume to 30" is a request, not thanks.
_SOCIAL: list[tuple[str, re.Pattern[str]]] = [
    ("thanks", re.compile(r"\b(thank you|thanks|cheers)\b")),
    ("bye", re.compile(r"\b(goodbye|good bye|bye|see you|good night)\b")),
]
_GREETINGS = {"hello", "hi", "hey", "hiya", "howdy", "greetings", "morning", "evening", "afternoon"}

PHRASINGS: dict[str, list[str]] = {
    "ask_name": ["what is my name", "who am i", "do you know my name", "do you remember my name",
                 "what am i called", "tell me my name", "say my name"],
    "assistant_name": ["what is your name", "who are you", "what are you called"],
    "capability": ["what can you do", "what do you do", "what are you able to do", "what can i ask you",
                   "what are your skills"],
    "time": ["what time is it", "what is the time", "tell me the time", "what time is it now",
             "do you have the time", "current time"],
    "date": ["what is the date", "what is the date today", "what is today date", "tell me the date",
             "what day is it", "what day is it today", "which day is it"],
    # The rejection class (a "garbage model", as in keyword spotting): everyday sentences that sound
    # like a fixed intent but are not one. When one of these is as close as the best intent, nothing
    # is guessed, so "what is that" is not taken for "what is the date".
    OTHER: ["what is that", "what is this", "what is it", "who is that", "who is it", "where am i",
            "where is it", "how are you", "what is up", "what is new", "what is the weather",
            "what is the news", "what is the score", "what is the temperature", "what is love",
            "what am i doing", "what is my age", "tell me a story", "tell me a joke", "tell me more",
            "tell me about it", "what is the matter", "what is wrong", "what is the point",
            "what do you mean", "what did you say", "what are you doing", "who is there", "what is going on",
            "what is the plan", "what is the answer", "what is the problem", "what is the difference"],
}
LABELS = {
    "ask_name": "your name", "assistant_name": "who I am", "capability": "what I can do",
    "time": "the time", "date": "the date",
}
# Words an answer to "Did you mean X or Y?" may use to pick one.
_ANSWER_WORDS = {
    "ask_name": {"name", "my", "mine"}, "assistant_name": {"who", "yourself", "you"},
    "capability": {"do", "can", "help", "skills"}, "time": {"time", "clock", "hour"},
    "date": {"date", "day", "today"},
}
_CANCEL_WORDS = {"no", "neither", "nothing", "cancel", "never", "nevermind", "none", "nope", "forget"}
_FIRST = {"1st", "first", "former"}
_SECOND = {"2nd", "second", "latter", "last"}
_LEADING_FILLER = {"please", "um", "uh", "er", "erm", "hey", "okay", "ok", "so", "well", "wren", "now",
                   "and", "oh", "hmm"}
_TRAILING_FILLER = {"please", "now", "then", "wren", "thanks"}
_POLITE_OPENERS = (("can", "you"), ("could", "you"), ("would", "you"), ("will", "you"))


@dataclass(frozen=True)
class Guess:
    intent: str | None = None  # a confident guess
    options: tuple[str, ...] = ()  # two intents too close to call: ask which one
    score: float = 0.0


def exact_intent(text: str, words: list[str], *, social: bool = False) -> str | None:
    """The fixed intent an exact pattern names in normalised text, or None."""
    if social:
        if words and (words[0] in _GREETINGS or text.startswith(("good morning", "good afternoon",
                                                                   "good evening", "good day"))):
            return "greet"
        return next((name for name, pattern in _SOCIAL if pattern.search(text)), None)
    found = next((name for name, pattern in _PRIMARY if pattern.search(text)), None)
    if found is None and "today" in words and "date" in words:
        return "date"
    return found


def strip_filler(words: list[str]) -> list[str]:
    start, end = 0, len(words)
    while True:
        if start < end and words[start] in _LEADING_FILLER:
            start += 1
        elif end - start >= 2 and tuple(words[start:start + 2]) in _POLITE_OPENERS:
            start += 2
        elif end > start and words[end - 1] in _TRAILING_FILLER:
            end -= 1
        else:
            return words[start:end]


def _ratio(a: str, b: str) -> float:
    """rapidfuzz ratio, or the ratio of the sorted letters when both have the same length: a
    recogniser that swaps sounds ("main" for "name") keeps the same letters."""
    plain = fuzz.ratio(a, b)
    return max(plain, fuzz.ratio(sorted(a), sorted(b))) if len(a) == len(b) else plain


def _sounds_alike(words: list[str], phrase: list[str]) -> float:
    """0.4 x character similarity + 0.6 x sound-alike similarity, 0..100."""
    sounds = _ratio(phonetic_string(words), phonetic_string(phrase))
    return 0.4 * _ratio(" ".join(words), " ".join(phrase)) + 0.6 * sounds


def _similarity(words: list[str], phrase: list[str]) -> float:
    if abs(len(words) - len(phrase)) > 2:
        return 0.0
    if abs(len(phonetic_string(words)) - len(phonetic_string(phrase))) > 2:
        return 0.0  # "what is the weather" is not "what is the date" with a slip
    whole = _sounds_alike(words, phrase)
    # The words the two share at the start and end say little ("what is the ..."): what differs
    # decides, so "what is the rate" stays far from "what is the date".
    start = 0
    while start < min(len(words), len(phrase)) and words[start] == phrase[start]:
        start += 1
    end = 0
    while end < min(len(words), len(phrase)) - start and words[-1 - end] == phrase[-1 - end]:
        end += 1
    rest, phrase_rest = words[start:len(words) - end], phrase[start:len(phrase) - end]
    if not rest or not phrase_rest:
        return whole if rest == phrase_rest else 0.8 * whole  # a word added or dropped
    return 0.3 * whole + 0.7 * _sounds_alike(rest, phrase_rest)


_PHRASE_WORDS = {intent: [p.split() for p in phrases] for intent, phrases in PHRASINGS.items()}


def fuzzy_intent(words: list[str]) -> Guess:
    """A tolerant guess at a fixed intent for normalised words (see the module docstring)."""
    words = strip_filler(words)
    if not words or len(words) > MAX_FUZZY_WORDS:
        return Guess()
    scores = {intent: max(_similarity(words, p) for p in phrases)
              for intent, phrases in _PHRASE_WORDS.items()}
    everyday = scores.pop(OTHER)
    ranked = sorted(scores, key=lambda i: scores[i], reverse=True)
    intent, runner_up = ranked[0], ranked[1]
    best = scores[intent]
    if best < ACCEPT or best - everyday < OTHER_MARGIN:
        return Guess(score=best)  # too far, or as close to an everyday sentence: neither guess nor ask
    if best - scores[runner_up] < CLARIFY_MARGIN:
        return Guess(options=(intent, runner_up), score=best)
    return Guess(intent=intent, score=best)


def clarifying_question(options: tuple[str, ...] | list[str]) -> str:
    labels = [LABELS.get(o, o) for o in options]
    return f"Did you mean {' or '.join(labels)}?"


def resolve_clarification(words: list[str], options: list[str]) -> str | None:
    """Which option an answer to the clarifying question picks, CANCEL, or None (a new request)."""
    words = strip_filler(words)
    if not words or len(words) > MAX_ANSWER_WORDS:
        return None  # a longer sentence is a new request ("set the volume to 20"), not an answer
    if set(words) & _CANCEL_WORDS:
        return CANCEL
    if len(options) >= 2:
        if set(words) & _FIRST:
            return options[0]
        if set(words) & _SECOND:
            return options[1]
    # An answer word that is a keyword counts 2, one that only sounds like a keyword counts 1 (a
    # recogniser may write "that they" for "the date"); the option with the most points wins.
    points: dict[str, int] = {}
    for option in options:
        keywords = _ANSWER_WORDS.get(option, set())
        sounds = {phonetic_key(k) for k in keywords if len(k) >= 3}
        points[option] = sum(
            2 if w in keywords else 1 if len(w) >= 3 and phonetic_key(w) in sounds else 0 for w in words
        )
    ranked = sorted(options, key=lambda o: points[o], reverse=True)
    if points.get(ranked[0]) and (len(ranked) == 1 or points[ranked[0]] > points[ranked[1]]):
        return ranked[0]
    return None
