"""The concurrency bench tells the answer's first audio from the hold phrase's: a reply that began with
"One moment." is counted as held, and its answer time is the first audio after the answer's own
`sentence_start`."""

from __future__ import annotations

from tests.support.received import Received
from tools.bench.streaming_devices import answer_audio


def sentence(t: float, text: str) -> Received:
    return Received(t, "json", {"type": "tts", "state": "sentence_start", "text": text})


def audio(t: float) -> Received:
    return Received(t, "audio", payload=b"\x00")


def test_a_reply_that_began_with_the_hold_phrase_is_held_and_its_answer_starts_later() -> None:
    records = [Received(0.0, "json", {"type": "tts", "state": "start"}), sentence(1.5, "One moment."),
               audio(1.5), audio(1.56), sentence(4.0, "It's three o'clock."), audio(4.0), audio(4.06)]
    assert answer_audio(records) == (4.0, True)


def test_a_reply_without_it_answers_with_its_first_audio() -> None:
    assert answer_audio([sentence(0.2, "Hello there."), audio(0.2), audio(0.26)]) == (0.2, False)


def test_the_words_one_moment_inside_an_answer_are_not_a_hold() -> None:
    records = [sentence(0.2, "Sure."), audio(0.2), sentence(0.8, "One moment."), audio(0.8)]
    assert answer_audio(records) == (0.2, False)


def test_a_reply_cut_off_during_the_hold_phrase_has_no_answer_audio() -> None:
    assert answer_audio([sentence(1.5, "One moment."), audio(1.5)]) == (None, True)
