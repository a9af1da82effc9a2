"""Command grammars: the sentences an agent can act on, as templates, compiled into a token automaton
that a recogniser can be constrained to (`wren.speech.asr.moonshine.constrained`).

Template syntax (a small subset of Home Assistant's hassil):

    (set | change) the volume to {number} [percent] [please]
    remind me at {number} to {any}

- `(a | b)` one of the alternatives; `[a]` optional; groups nest.
- `{number}`: a number as a recogniser writes it: digits 0–100 or the spelled words ("twenty five",
  "twenty-five").
- `{any}`: free text to the end of the sentence (a name, a reminder's task): the recogniser decodes it
  unconstrained.
- Every word may start with a capital (the first word of a sentence does); "." "?" "!" may end it.

The automaton is an NFA over token ids: states are ints, `edges[state]` maps a token to the next
states, `empty[state]` are its epsilon moves, `accepting` states may end the sentence and `free` states
take any token. `TokenAutomaton.step()` works on sets of states, so words that share their first tokens
("to", "tomorrow") need no determinising.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

MAX_TEMPLATES = 400
MAX_TEMPLATE_CHARS = 2000
MAX_STATES = 200_000  # a device listing thousands of tools gets the first part of its grammar
ENDINGS = (".", "?", "!")
_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
          "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_TOKEN = re.compile(r"\(|\)|\[|\]|\||\{[a-z_]+\}|[^\s()\[\]|{}]+")


class GrammarError(ValueError):
    pass


def number_words() -> list[str]:
    """How a recogniser may write 0–100: digits, words, and tens-units with a space or a hyphen."""
    spelled = [*_UNITS, *_TENS, "a hundred", "one hundred", "hundred"]
    for tens in _TENS:
        for unit in _UNITS[1:10]:
            spelled += [f"{tens} {unit}", f"{tens}-{unit}"]
    return [str(n) for n in range(101)] + spelled


# ---- templates → a tree ----------------------------------------------------------------------------------


@dataclass
class _Node:
    kind: str  # "word", "slot", "seq", "alt", "opt"
    text: str = ""
    parts: list[_Node] = field(default_factory=list)


def parse(template: str) -> _Node:
    tokens = _TOKEN.findall(template.lower())
    position = 0

    def sequence(closing: str | None) -> _Node:
        nonlocal position
        alternatives: list[_Node] = [_Node("seq")]
        while position < len(tokens):
            token = tokens[position]
            position += 1
            if token == closing:
                break
            if token in ")]":
                raise GrammarError(f"unbalanced {token!r} in {template!r}")
            if token == "|":
                alternatives.append(_Node("seq"))
            elif token == "(":
                alternatives[-1].parts.append(sequence(")"))
            elif token == "[":
                alternatives[-1].parts.append(_Node("opt", parts=[sequence("]")]))
            elif token.startswith("{"):
                alternatives[-1].parts.append(_Node("slot", token[1:-1]))
            else:
                alternatives[-1].parts.append(_Node("word", token))
        else:
            if closing is not None:
                raise GrammarError(f"missing {closing!r} in {template!r}")
        return alternatives[0] if len(alternatives) == 1 else _Node("alt", parts=alternatives)

    tree = sequence(None)
    if position != len(tokens):
        raise GrammarError(f"unbalanced ')' in {template!r}")
    return tree


def words_of(templates: Iterable[str]) -> set[str]:
    """Every literal word the templates use (the vocabulary for near-miss rescoring)."""
    found: set[str] = set()

    def walk(node: _Node) -> None:
        if node.kind == "word":
            found.add(node.text)
        for part in node.parts:
            walk(part)

    for template in templates:
        try:
            walk(parse(template))
        except GrammarError:
            continue
    return found


def samples(template: str, count: int, seed: int = 0, slots: dict[str, list[str]] | None = None) -> list[str]:
    """Up to `count` distinct sentences of a template, drawn at random (for tests and docs); `slots` gives
    the values of `{number}` and `{any}` to draw from."""
    import random

    rng = random.Random(seed)
    values = {"number": ["five", "30", "twenty five"], "any": ["call mum"], **(slots or {})}

    def draw(node: _Node) -> list[str]:
        if node.kind == "word":
            return [node.text]
        if node.kind == "slot":
            return [rng.choice(values.get(node.text, [node.text]))]
        if node.kind == "alt":
            return draw(rng.choice(node.parts))
        if node.kind == "opt":
            return draw(node.parts[0]) if rng.random() < 0.5 else []
        return [word for part in node.parts for word in draw(part)]

    tree = parse(template)
    found: dict[str, None] = {}
    for _ in range(count * 20):
        found[" ".join(draw(tree))] = None
        if len(found) >= count:
            break
    return list(found)


def is_template(phrase: str) -> bool:
    return any(mark in phrase for mark in "([{")


# ---- a tree → a token automaton --------------------------------------------------------------------------


class TokenAutomaton:
    def __init__(self) -> None:
        self.edges: list[dict[int, set[int]]] = []
        self.empty: list[set[int]] = []
        self.accepting: set[int] = set()
        self.free: set[int] = set()
        self.start = self._state()
        self._closures: dict[frozenset[int], frozenset[int]] = {}

    def _state(self) -> int:
        if len(self.edges) >= MAX_STATES:
            raise GrammarError("the grammar is too large")
        self.edges.append({})
        self.empty.append(set())
        return len(self.edges) - 1

    def link(self, source: int, token: int, target: int) -> None:
        self.edges[source].setdefault(token, set()).add(target)

    def chain(self, source: int, tokens: list[int], target: int) -> None:
        for token in tokens[:-1]:
            following = self._state()
            self.link(source, token, following)
            source = following
        self.link(source, tokens[-1], target)

    def closure(self, states: Iterable[int]) -> frozenset[int]:
        key = frozenset(states)
        cached = self._closures.get(key)
        if cached is None:
            seen, todo = set(key), list(key)
            while todo:
                for target in self.empty[todo.pop()]:
                    if target not in seen:
                        seen.add(target)
                        todo.append(target)
            cached = self._closures[key] = frozenset(seen)
        return cached

    def initial(self) -> frozenset[int]:
        return self.closure([self.start])

    def allowed(self, states: frozenset[int]) -> set[int]:
        tokens: set[int] = set()
        for state in states:
            tokens.update(self.edges[state])
        return tokens

    def step(self, states: frozenset[int], token: int) -> frozenset[int]:
        targets = {s for s in states if s in self.free}
        for state in states:
            targets.update(self.edges[state].get(token, ()))
        return self.closure(targets)

    def is_free(self, states: frozenset[int]) -> bool:
        return any(s in self.free for s in states)

    def can_end(self, states: frozenset[int]) -> bool:
        return any(s in self.accepting for s in states)


def accepts(automaton: TokenAutomaton, tokens: Iterable[int]) -> bool:
    """Is this token sequence a whole sentence of the grammar?"""
    states = automaton.initial()
    for token in tokens:
        states = automaton.step(states, token)
        if not states:
            return False
    return automaton.can_end(states)


def compile_templates(templates: Iterable[str], encode_word: Callable[[str], list[int]]) -> TokenAutomaton:
    """One automaton for all templates. `encode_word("Set")` gives a word's tokens as the recogniser
    writes it (a word-start mark first). Templates that do not parse are skipped (they may come from a
    device's tool list)."""
    automaton = TokenAutomaton()
    words: dict[str, list[int]] = {}

    def tokens(word: str) -> list[int]:
        if word not in words:
            words[word] = encode_word(word)
        return words[word]

    def word(source: int, text: str) -> int:
        target = automaton._state()
        for spelling in {text, text[:1].upper() + text[1:]}:
            ids = tokens(spelling)
            if ids:
                automaton.chain(source, ids, target)
        return target

    def build(node: _Node, source: int) -> int:
        if node.kind == "word":
            return word(source, node.text)
        if node.kind == "seq":
            for part in node.parts:
                source = build(part, source)
            return source
        if node.kind == "alt":
            target = automaton._state()
            for part in node.parts:
                automaton.empty[build(part, source)].add(target)
            return target
        if node.kind == "opt":
            target = build(node.parts[0], source)
            automaton.empty[source].add(target)
            return target
        if node.text == "number":
            target = automaton._state()
            for spelled in number_words():
                end = source
                for piece in spelled.split():  # "twenty-five" is one word, "twenty five" two
                    end = word(end, piece)
                automaton.empty[end].add(target)
            return target
        if node.text == "any":
            free = automaton._state()
            automaton.free.add(free)
            automaton.accepting.add(free)
            automaton.empty[source].add(free)
            return free
        raise GrammarError(f"unknown slot {{{node.text}}}")

    # Punctuation continues the last word: its tokens are what "time." adds to "time".
    punctuation = {e: encode_word("time" + e)[len(encode_word("time")):] for e in ENDINGS}
    for count, template in enumerate(templates):
        if count >= MAX_TEMPLATES:
            break
        try:
            if len(template) > MAX_TEMPLATE_CHARS:
                continue
            tree = parse(template)
            end = build(tree, automaton.start)
        except GrammarError:
            continue
        automaton.accepting.add(end)
        for ending in ENDINGS:
            ids = punctuation[ending]
            if ids:
                final = automaton._state()
                automaton.chain(end, ids, final)
                automaton.accepting.add(final)
    return automaton
