"""Recognition biased toward what Wren can act on: near-miss words of a hypothesis are replaced by phrase-set
words when the model itself finds the replacement about as likely.

The phrase set (built by the agent: its own intent phrases, the device's MCP tool names, parameter names
and enum values, names people taught it) gives a vocabulary. A hypothesis word (or two-word span) that is
not in it but looks or sounds like a vocabulary word (`SIMILARITY`, letters or a consonant skeleton) makes a
candidate sentence. Every candidate is then scored by the model on the same audio (teacher forcing: one
decoder pass, ≈10 ms), and the best candidate replaces the greedy text if

    log p(candidate | audio) >= log p(greedy | audio) - margin × words replaced

(half the margin for a replacement only spelled alike, which the decoder did not rank high itself). Whole
phrase-set sentences that look or sound like the hypothesis are candidates too (`sentence_candidates`): the
greedy search misses the most likely sentence now and then, most on unusual voices.

`margin` is the bias strength in nats per word (`[asr] bias`, see `margin_for`): a strong prior for the
built-in engine, which can only act on its own phrases anyway; a weak one with an LLM engine, so that open
questions keep what was heard and only near-ties flip. This is the rescoring half of Home Assistant's
Speech-to-Phrase idea, without closing the vocabulary.

With the strong prior, phrases written as grammar templates (`wren.speech.asr.grammar`: the agent's
commands) also constrain a second decode: when the open transcript is not a command, the recogniser finds
the most likely command in the same audio, and `prefers_command` decides between the two:

    take the command if  log p(command) >= log p(heard)
                     or  log p(command) >= log p(heard) - GRAMMAR_MARGIN
                         and (nothing was heard, or the word counts differ by at most 1 + heard/6)

Measured on the understanding bench (two voices, clean and 20 dB SNR): commands misheard by the open
search score 0–7.9 nats below what was heard and have about as many words (±1); open questions forced
into a command score 8.6–28 below, and the ones closest to the margin are much shorter than what was heard
("Thank you" for "Can you recommend a good book?"). What it cannot undo: a command the model hears as
another one ("who am I" in piper's voice scores below "Good night." on the same audio). With an LLM engine
the grammar is not used: open questions stay as heard.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz, process

from wren.speech.asr.grammar import TokenAutomaton, compile_templates, is_template, words_of

SIMILARITY = 72.0
SENTENCE_SIMILARITY = 55.0
MAX_SENTENCES = 4
# A number as the recogniser writes it: digits, or one of the spelled tens and units.
_NUMBER = re.compile(
    r"\b(?:\d+|(?:twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)(?:[ -](?:one|two|three|four|five|"
    r"six|seven|eight|nine))?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen)\b",
    re.IGNORECASE,
)
SPELLED_SHARE = 0.5
MAX_CANDIDATES = 6
STRONG_MARGIN = 4.0  # nats per replaced word: built-in engine
WEAK_MARGIN = 1.0  # LLM engines: open questions stay as heard
GRAMMAR_MARGIN = 8.0  # nats a command may be less likely than the open transcript (strong prior only)
_WORD = re.compile(r"[A-Za-z][A-Za-z']*")
_SPOKEN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9']*")  # "50" is a word said too
# Function words are never replaced, nor used as replacements: the model knows them better than we do.
_COMMON = {
    "a", "an", "the", "to", "of", "in", "on", "at", "is", "it", "be", "by", "for", "and", "or", "my",
    "me", "i", "you", "we", "what", "how", "who", "when", "where", "why", "can", "do", "are", "was",
    "this", "that", "with", "from", "all", "some", "so", "too", "not", "then", "than", "there", "their",
    "they", "them", "your", "our", "his", "her", "its",
}


def margin_for(setting: str, agent_engine: str) -> float:
    """`[asr] bias`: "auto" (strong with the built-in engine, weak with an LLM), "strong", "weak", "off"."""
    if setting == "off":
        return 0.0
    if setting == "strong" or (setting == "auto" and agent_engine == "builtin"):
        return STRONG_MARGIN
    return WEAK_MARGIN


def _skeleton_sentence(text: str) -> str:
    return " ".join(_skeleton(w) for w in text.split())


def _skeleton(word: str) -> str:
    """A crude sound key: first letter, then consonants without doubles ("siobhan" → "sbhn")."""
    word = word.lower()
    rest = re.sub(r"[aeiouy']", "", word[1:])
    return word[:1] + re.sub(r"(.)\1+", r"\1", rest)


@dataclass(frozen=True)
class Candidate:
    text: str
    replaced: int  # words of the hypothesis replaced
    heard: bool = True  # the decoder itself ranked a replacement high (else: only spelled alike)

    def allowance(self, margin: float) -> float:
        """How much less likely than the greedy text this candidate may be (nats). A replacement only
        spelled like a phrase-set word gets half: "thanks" must not become "thank" on spelling alone."""
        return margin * self.replaced * (1.0 if self.heard else SPELLED_SHARE)


def prefers_command(heard: str, heard_score: float, command: str, command_score: float) -> bool:
    """The rule above: is the grammar's command a better reading of the audio than the open transcript?"""
    if command_score >= heard_score:
        return True
    if command_score < heard_score - GRAMMAR_MARGIN:
        return False
    heard_words, command_words = len(_SPOKEN_WORD.findall(heard)), len(_SPOKEN_WORD.findall(command))
    return heard_words == 0 or abs(heard_words - command_words) <= 1 + heard_words // 6


class PhraseBias:
    def __init__(self, phrases: Iterable[str], margin: float = STRONG_MARGIN) -> None:
        phrases = list(phrases)
        self.templates = [p for p in phrases if is_template(p)]
        phrases = [p for p in phrases if not is_template(p)]
        vocabulary: dict[str, str] = {}
        for phrase in [*phrases, " ".join(sorted(words_of(self.templates)))]:
            for word in _WORD.findall(phrase):
                key = word.lower()
                if len(key) >= 3 and key not in _COMMON:
                    # keep the spelling people taught ("Siobhan"), else lower case
                    vocabulary.setdefault(key, word if word[:1].isupper() else key)
        self.vocabulary = vocabulary
        # Whole phrases (2–8 words) are candidates too: a greedy search can miss the most likely sentence
        # ("Saint-Lavalium to thirty." scores below "Set the volume to thirty." on the same audio).
        self.sentences = [" ".join(_WORD.findall(p.lower())) for p in phrases if 2 <= len(p.split()) <= 8]
        self._sentence_keys = [_skeleton_sentence(p) for p in self.sentences]
        self._keys = list(vocabulary)
        self._skeletons = [_skeleton(k) for k in self._keys]
        self.margin = margin
        self._first_tokens: dict[int, list[str]] | None = None
        self._grammar: TokenAutomaton | None = None

    def grammar(self, tokenizer: Any) -> TokenAutomaton | None:
        """The command grammar as a token automaton (compiled once per phrase set), or None: no templates,
        or not the strong prior (with an LLM engine open questions keep what was heard)."""
        if not self.templates or self.margin < STRONG_MARGIN:
            return None
        if self._grammar is None:
            self._grammar = compile_templates(self.templates, tokenizer.encode)
        return self._grammar

    def by_first_token(self, tokenizer: Any) -> dict[int, list[str]]:
        """Vocabulary words by the first token of their spelling (computed once per phrase set). A first
        token of one letter ("▁m" of "mute") says too little and is left out unless it is the whole word."""
        if self._first_tokens is None:
            index: dict[int, list[str]] = {}
            for key, word in self.vocabulary.items():
                for spelling in {word, word[:1].upper() + word[1:]}:
                    ids = tokenizer.encode(spelling)
                    if ids and (len(ids) == 1 or len(tokenizer.piece(ids[0])) >= 3):
                        index.setdefault(ids[0], []).append(key)
            self._first_tokens = index
        return self._first_tokens

    def __bool__(self) -> bool:
        return bool(self._keys) and self.margin > 0

    def _closest(self, span: str) -> tuple[str, float] | None:
        letters = process.extractOne(span, self._keys, scorer=fuzz.ratio, score_cutoff=SIMILARITY)
        sounds = process.extractOne(_skeleton(span), self._skeletons, scorer=fuzz.ratio, score_cutoff=85.0)
        best: tuple[str, float] | None = (letters[0], letters[1]) if letters else None
        if sounds and len(_skeleton(span)) >= 3 and (best is None or sounds[1] > best[1]):
            best = (self._keys[sounds[2]], sounds[1])
        return best

    def sentence_candidates(self, hypothesis: str) -> list[Candidate]:
        """Phrase-set sentences that look or sound like the whole hypothesis (numbers in them replaced by the
        hypothesis's own), best first; none when the hypothesis is made of phrase-set words already."""
        words = [w.lower() for w in _WORD.findall(hypothesis)]
        if not self or not words or all(w in self.vocabulary or w in _COMMON for w in words):
            return []
        plain, sounds = " ".join(words), _skeleton_sentence(" ".join(words))
        heard_numbers = _NUMBER.findall(hypothesis)[:2]
        scored: dict[str, float] = {}
        for sentence, key in zip(self.sentences, self._sentence_keys, strict=True):
            variants = [sentence]
            if heard_numbers and _NUMBER.search(sentence):
                variants = [_NUMBER.sub(n, sentence, count=1) for n in heard_numbers]
            for variant in variants:
                similarity = max(fuzz.ratio(plain, variant), fuzz.ratio(sounds, key))
                if similarity >= SENTENCE_SIMILARITY and variant != plain:
                    scored[variant] = max(similarity, scored.get(variant, 0.0))
        best = sorted(scored, key=lambda v: -scored[v])[:MAX_SENTENCES]
        ending = "?" if hypothesis.rstrip().endswith("?") else "."
        return [Candidate(v[:1].upper() + v[1:] + ending, 1, False) for v in best]

    def candidates(self, hypothesis: str, heard_as: dict[int, set[str]] | None = None) -> list[Candidate]:
        """Sentences with one near-miss span (1–2 words) replaced, best matches first, and all of them
        replaced at once; empty when every word is known or nothing is close.

        `heard_as` (from the decoder): word index → vocabulary words whose first token the model also
        ranked high where that word starts ("Said" where "Set" was a close second), which finds
        near-misses that spelling alone does not."""
        if not self:
            return []
        words = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(hypothesis)]
        known = set(self._keys)
        options: list[_Option] = []
        for index, alternatives in (heard_as or {}).items():
            if index < len(words) and words[index][2].lower() not in known | _COMMON:
                start, end, word = words[index]
                for key in alternatives:  # the model heard it as possible: the rescoring decides
                    similarity = 50 + fuzz.ratio(word.lower(), key) / 2
                    options.append(_Option(similarity, start, end, self.vocabulary[key], True))
        for i in range(len(words)):
            for size in (1, 2):
                span_words = words[i : i + size]
                if len(span_words) < size:
                    continue
                span = " ".join(w for _, _, w in span_words).lower()
                if any(w.lower() in known or w.lower() in _COMMON for _, _, w in span_words):
                    continue
                if len(span.replace(" ", "")) < 3:
                    continue
                match = self._closest(span.replace(" ", "") if size == 2 else span)
                if match is None or match[0] == span:
                    continue
                replacement = self.vocabulary[match[0]]
                options.append(_Option(match[1], span_words[0][0], span_words[-1][1], replacement, False))
        options.sort(key=lambda o: -o.similarity)
        chosen = _non_overlapping(options)[:MAX_CANDIDATES]
        result = [Candidate(_replace(hypothesis, [o]), 1, o.heard) for o in chosen]
        if len(chosen) > 1:
            result.append(Candidate(_replace(hypothesis, chosen), len(chosen), all(o.heard for o in chosen)))
        return result


@dataclass(frozen=True)
class _Option:
    similarity: float
    start: int  # character span of the hypothesis replaced
    end: int
    replacement: str
    heard: bool


def _non_overlapping(options: list[_Option]) -> list[_Option]:
    taken: list[_Option] = []
    for option in options:
        if all(option.end <= t.start or option.start >= t.end for t in taken):
            taken.append(option)
    return taken


def _replace(text: str, options: list[_Option]) -> str:
    for option in sorted(options, key=lambda o: -o.start):
        start, end, word = option.start, option.end, option.replacement
        original = text[start:end]
        if original[:1].isupper() and word[:1].islower():
            word = word[:1].upper() + word[1:]
        text = text[:start] + word + text[end:]
    return text
