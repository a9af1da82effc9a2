"""`TurnDecider`: what the session does with an utterance.

The empty-input rule on its own is covered by tests/server/test_empty_input.py."""

from __future__ import annotations

import pytest
from wren.pipeline.turn_decision import GiveUp, Prompt, Reply, Silence, TurnDecider
from wren.pipeline.turn_detection import ListenMode

AUTO, MANUAL, REALTIME = ListenMode.AUTO, ListenMode.MANUAL, ListenMode.REALTIME


def empty(decider: TurnDecider, mode: ListenMode = AUTO, heard_speech: bool = True,
          keep_socket: bool = False):
    return decider.decide("", mode, heard_speech, keep_socket)


def test_words_are_answered():
    assert TurnDecider().decide("what time is it", AUTO, True, False) == Reply("what time is it")


def test_words_reset_the_empty_count():
    decider = TurnDecider()
    assert [empty(decider), empty(decider)] == [Prompt("silence", 1), Prompt("silence", 2)]
    assert decider.decide("lights on", AUTO, True, False) == Reply("lights on")
    assert decider.rule.empty_count == 0
    assert empty(decider) == Prompt("silence", 1)


@pytest.mark.parametrize("mode", [AUTO, REALTIME])
@pytest.mark.parametrize(
    ("heard_speech", "first_two"),
    [(True, [Prompt("silence", 1), Prompt("silence", 2)]), (False, [Silence(), Silence()])],
)
def test_the_third_empty_turn_in_a_row_gives_up(mode, heard_speech, first_two):
    decider = TurnDecider()
    turns = [empty(decider, mode, heard_speech) for _ in range(3)]
    assert turns == [*first_two, GiveUp("silence", 3)]


def test_a_socket_kept_for_something_pending_never_gives_up_it_listens_quietly():
    decider = TurnDecider()
    turns = [empty(decider, keep_socket=True) for _ in range(9)]
    assert not any(isinstance(t, GiveUp) for t in turns)
    assert turns[2] == Silence()  # where it would have given up
    assert GiveUp("silence", 3) in [empty(decider, keep_socket=False) for _ in range(3)]


def test_a_kept_socket_turns_the_give_up_of_silence_into_silence():
    decider = TurnDecider()
    assert [empty(decider, heard_speech=False, keep_socket=True) for _ in range(3)] == [Silence()] * 3


@pytest.mark.parametrize("heard_speech", [True, False])
@pytest.mark.parametrize("keep_socket", [True, False])
def test_an_empty_manual_press_always_prompts_once(heard_speech, keep_socket):
    decider = TurnDecider()
    turns = [empty(decider, MANUAL, heard_speech, keep_socket) for _ in range(5)]
    assert turns == [Prompt("manual", 1)] * 5


def test_an_empty_manual_press_resets_the_count_of_auto_turns():
    decider = TurnDecider()
    empty(decider)
    empty(decider)
    assert empty(decider, MANUAL) == Prompt("manual", 1)
    assert empty(decider) == Prompt("silence", 1)


def test_a_wake_word_arms_the_wake_wording_even_without_speech():
    decider = TurnDecider()
    decider.wake()
    assert empty(decider, heard_speech=False) == Prompt("wake", 1)  # without the wake word: Silence
    assert empty(decider, heard_speech=False) == Silence()  # the prompt used the arming up


def test_wake_after_wake_counts_to_the_wake_goodbye():
    decider = TurnDecider()
    turns = []
    for _ in range(3):
        decider.wake()
        turns.append(empty(decider, heard_speech=False))
    assert turns == [Prompt("wake", 1), Prompt("wake", 2), GiveUp("wake", 3)]


def test_words_after_a_wake_word_clear_the_wake_wording():
    decider = TurnDecider()
    decider.wake()
    assert decider.decide("hello", AUTO, True, False) == Reply("hello")
    assert not decider.armed_by_wake
    assert empty(decider) == Prompt("silence", 1)


def test_a_typed_query_resets_the_empty_count():
    decider = TurnDecider()
    empty(decider)
    empty(decider)
    decider.typed()
    assert [empty(decider), empty(decider)] == [Prompt("silence", 1), Prompt("silence", 2)]
