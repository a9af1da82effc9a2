"""Command grammars: templates parse, compile to a token automaton that accepts exactly their sentences, and a
beam search constrained to it finds the best command, never the empty one, and gives up below its floor."""

from __future__ import annotations

import numpy as np
import pytest
from wren.speech.asr.bias import GRAMMAR_MARGIN, prefers_command
from wren.speech.asr.grammar import (
    MAX_STATES,
    GrammarError,
    accepts,
    compile_templates,
    is_template,
    number_words,
    parse,
    samples,
    words_of,
)
from wren.speech.asr.moonshine.constrained import constrained_search
from wren.speech.asr.moonshine.tokenizer import END_ID, START_ID

# A toy tokenizer: one token per word (a word-start mark is implied), punctuation its own token.
VOCABULARY = ["<unk>", "<s>", "</s>", ".", "?", "!"]


def token(piece: str) -> int:
    if piece not in VOCABULARY:
        VOCABULARY.append(piece)
    return VOCABULARY.index(piece)


def encode(text: str) -> list[int]:
    ids: list[int] = []
    for word in text.split():
        ending = word[-1] if word[-1] in ".?!" else ""
        body = word[:-1] if ending else word
        if body:
            ids.append(token(body))
        if ending:
            ids.append(token(ending))
    return ids


def grammar(*templates: str):
    return compile_templates(templates, encode)


def test_a_template_accepts_its_sentences_with_a_capital_and_an_ending_and_nothing_else():
    automaton = grammar("(set | change) the volume to {number} [percent] [please]")
    for sentence in ("Set the volume to 30.", "change the volume to twenty five percent please?",
                     "Set the volume to 100", "set the volume to seventy-two!"):
        assert accepts(automaton, encode(sentence)), sentence
    for sentence in ("Set the volume.", "set the volume to 30 percent percent", "the volume to 30",
                     "Set the volume to 101.", ""):
        assert not accepts(automaton, encode(sentence)), sentence


def test_numbers_are_written_as_digits_or_words():
    written = number_words()
    assert {"0", "42", "100", "twenty", "twenty five", "twenty-five", "one hundred"} <= set(written)


def test_a_free_slot_takes_any_words_to_the_end():
    automaton = grammar("(my name is | call me) {any}")
    assert accepts(automaton, encode("My name is Siobhan O'Neill."))
    assert accepts(automaton, encode("call me Bob"))
    assert not accepts(automaton, encode("Bob is my name"))


def test_templates_that_do_not_parse_are_skipped_and_others_still_compile():
    with pytest.raises(GrammarError):
        parse("(set the volume")
    with pytest.raises(GrammarError):
        parse("set ] the volume")
    automaton = grammar("(set the volume", "what time is it", "say {unknown_slot}")
    assert accepts(automaton, encode("What time is it?"))


def test_a_huge_grammar_stops_at_a_bound():
    templates = [f"word{i} ({' | '.join(f'w{i}x{j}' for j in range(400))})" for i in range(400)]
    automaton = grammar(*templates)
    assert len(automaton.edges) <= MAX_STATES


def test_samples_and_words_of_a_template():
    template = "(turn | make) the light (red | blue) [please]"
    drawn = samples(template, 20, seed=1)
    assert len(drawn) == len(set(drawn)) and all(accepts(grammar(template), encode(s)) for s in drawn)
    assert words_of([template, "call me {any}"]) == {"turn", "make", "the", "light", "red", "blue", "please",
                                                      "call", "me"}
    assert is_template(template) and not is_template("what time is it")


# ---- the constrained search, on a scripted decoder ---------------------------------------------------------


def scripted_step(preferences: dict[tuple[int, ...], dict[int, float]]):
    """A decoder whose next-token log-probabilities depend on the tokens so far (the cache carries them)."""
    def step(ids: np.ndarray, cache: dict[str, np.ndarray]):
        history = cache["history"]
        history = np.concatenate([history, ids], axis=1) if history.size else ids
        rows = np.full((len(ids), len(VOCABULARY) + 8), -20.0, np.float32)
        for row, past in enumerate(history):
            for tok, log_p in preferences.get(tuple(int(t) for t in past[1:]), {}).items():
                rows[row, tok] = log_p
        return rows, {"history": history}

    return step


def run(automaton, preferences, floor=-np.inf, max_tokens=10):
    start = {"history": np.zeros((1, 0), np.int64)}
    return constrained_search(automaton, scripted_step(preferences), start, max_tokens, floor=floor)


def test_the_search_finds_the_most_likely_sentence_the_grammar_allows():
    automaton = grammar("set the volume to {number}", "what time is it")
    set_, the, volume, to, five, time_ = (token(w) for w in ("set", "the", "volume", "to", "five", "time"))
    what = token("what")
    preferences = {
        (): {token("saint"): -0.1, set_: -1.0, what: -3.0},  # the open decoder would say "saint"
        (set_,): {the: -0.2},
        (set_, the): {volume: -0.5, time_: -0.1},
        (set_, the, volume): {to: -0.1},
        (set_, the, volume, to): {five: -0.3},
        (set_, the, volume, to, five): {END_ID: -0.1},
    }
    found = run(automaton, preferences)
    assert found is not None and found.tokens == [set_, the, volume, to, five]
    assert found.score == pytest.approx(-1.0 - 0.2 - 0.5 - 0.1 - 0.3 - 0.1, abs=1e-5)


def test_the_search_never_returns_the_empty_sentence_and_gives_up_below_its_floor():
    automaton = grammar("[hello] {any}")
    hello = token("hello")
    preferences = {(): {END_ID: -0.01, hello: -6.0}, (hello,): {END_ID: -0.5}}
    found = run(automaton, preferences)
    assert found is not None and found.tokens == [hello]
    assert run(automaton, preferences, floor=-5.0) is None


def test_the_first_decoder_step_starts_from_the_start_token():
    seen: list[int] = []

    def step(ids, cache):
        seen.extend(int(i) for i in ids[:, 0])
        return np.full((len(ids), len(VOCABULARY) + 8), -1.0, np.float32), cache

    constrained_search(grammar("stop"), step, {}, max_tokens=3)
    assert seen[0] == START_ID


# ---- the rule between the open transcript and the command --------------------------------------------------


def test_a_command_at_least_as_likely_as_what_was_heard_is_taken():
    assert prefers_command("Saint-Namal Yun-tah-50.", -12.7, "Set the volume to 50.", -3.9)


def test_a_command_within_the_margin_with_about_as_many_words_is_taken():
    assert prefers_command("New to the speaker.", -1.0, "Mute the speaker.", -7.7)
    assert prefers_command("", -0.2, "Hey there!", -7.5)  # nothing heard in voiced audio


def test_a_much_less_likely_or_much_shorter_command_is_not_taken():
    assert not prefers_command("Tell me a joke.", -1.4, "Tell me the time.", -1.4 - GRAMMAR_MARGIN - 0.1)
    assert not prefers_command("Can you recommend a good work?", -2.5, "Thank you.", -8.0)
    assert not prefers_command("Set the volume to 50.", -5.0, "Thank you.", -10.8)
