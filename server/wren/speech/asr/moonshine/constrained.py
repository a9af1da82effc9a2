"""Decoding constrained to a command grammar: the most likely sentence the agent can act on.

A beam search over the grammar's token automaton (`wren.speech.asr.grammar`): every hypothesis is a set
of automaton states, a token sequence and its log-probability; each step runs the decoder once for the
whole beam (batch = beam) and keeps the `beam` best extensions the automaton allows. Hypotheses that may
end are closed with the end-of-text token; the search stops when no open hypothesis can beat the best
closed one (log-probabilities only fall). Free slots (`{any}`) allow every token: there the search keeps
the decoder's own top tokens.

Cost: about one decoder step per token of the sentence, for the whole beam at once (≈ 3–6 ms a step
here), so a short command costs 30–80 ms. The caller runs it only when the open transcript is not
already a grammar sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from wren.speech.asr.grammar import TokenAutomaton
from wren.speech.asr.moonshine.tokenizer import END_ID, START_ID

BEAM = 5
# (input ids [B, 1], the decoder's self-attention cache for B rows) -> (log-probabilities [B, vocab], that
# cache one step on). The step adds the audio's cross-attention cache itself: it is the same for every row.
StepFn = Callable[[np.ndarray, dict[str, np.ndarray]], tuple[np.ndarray, dict[str, np.ndarray]]]


@dataclass(frozen=True)
class Constrained:
    tokens: list[int]
    score: float  # log p(tokens + end | audio)


@dataclass
class _Hypothesis:
    states: frozenset[int]
    tokens: list[int]
    score: float
    row: int  # its row in the batched decoder cache


def constrained_search(
    automaton: TokenAutomaton, step: StepFn, cache: dict[str, np.ndarray], max_tokens: int, beam: int = BEAM,
    floor: float = -np.inf,
) -> Constrained | None:
    """The best grammar sentence for the audio `step` decodes, or None if none fits in `max_tokens` or
    scores above `floor` (hypotheses below it are dropped as soon as they fall there: the caller would
    not take them, and an open question forced into the grammar falls fast).
    `cache`: the empty self-attention cache (batch 1); its rows follow the beam."""
    active = [_Hypothesis(automaton.initial(), [], 0.0, 0)]
    best: Constrained | None = None
    previous = START_ID
    inputs = np.array([[previous]], np.int64)
    for _ in range(max_tokens + 1):
        log_probs, cache = step(inputs, cache)
        extensions: list[tuple[float, int, int]] = []  # score, parent, token
        for index, hypothesis in enumerate(active):
            row = log_probs[hypothesis.row]
            if hypothesis.tokens and automaton.can_end(hypothesis.states):  # never the empty sentence
                ended = hypothesis.score + float(row[END_ID])
                if ended > floor and (best is None or ended > best.score):
                    best = Constrained(hypothesis.tokens, ended)
            if len(hypothesis.tokens) >= max_tokens:
                continue
            allowed = automaton.allowed(hypothesis.states)
            if automaton.is_free(hypothesis.states):
                top = np.argpartition(row, -beam)[-beam:]
                allowed |= {int(t) for t in top}
            allowed.discard(END_ID)
            if not allowed:
                continue
            ids = np.fromiter(allowed, np.int64, len(allowed))
            scores = row[ids]
            keep = np.argsort(scores)[-beam:] if len(ids) > beam else range(len(ids))
            for k in keep:
                extensions.append((hypothesis.score + float(scores[k]), index, int(ids[k])))
        extensions.sort(key=lambda e: -e[0])
        bar = max(floor, best.score) if best is not None else floor
        extensions = [e for e in extensions if e[0] > bar]
        if not extensions:
            return best
        chosen = extensions[:beam]
        rows = [active[parent].row for _, parent, _ in chosen]
        cache = {name: value[rows] for name, value in cache.items()}
        active = [
            _Hypothesis(automaton.step(active[parent].states, token), [*active[parent].tokens, token], score,
                        i)
            for i, (score, parent, token) in enumerate(chosen)
        ]
        inputs = np.array([[token] for _, _, token in chosen], np.int64)
    return best
