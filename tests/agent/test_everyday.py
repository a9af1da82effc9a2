"""Everyday answers of the built-in agent: sums, unit conversions, "repeat that", "stop"."""

from __future__ import annotations

import pytest
from wren.agent.everyday import everyday_answer, spoken
from wren.agent.nlu import normalize_words


def answer(text: str, last: str | None = None) -> str | None:
    return everyday_answer(normalize_words(text), last)


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("What is twelve times seven?", "12 times 7 is 84."),
        ("what's 12 x 7", "12 times 7 is 84."),
        ("fifteen minus eight", "15 minus 8 is 7."),
        ("What is 7 divided by 2?", "7 divided by 2 is 3.5."),
        ("2 plus 3 times 4", "2 plus 3 times 4 is 14."),  # precedence
        ("two to the power of ten", "2 to the power of 10 is 1024."),
        ("ten percent of two hundred and fifty", "10 percent of 250 is 25."),
        ("square root of eighty one", "The square root of 81 is 9."),
        ("seven squared", "7 squared is 49."),
        ("what is 1 divided by 0", "I can't divide by zero."),
    ],
)
def test_sums_in_words_or_digits(said, expected):
    assert answer(said) == expected


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("how many centimetres in an inch", "1 inch is 2.54 centimetres."),
        ("convert five miles to kilometers", "5 miles is 8.05 kilometres."),  # US spelling folded
        ("what's 100 fahrenheit in celsius", "100 degrees Fahrenheit is 37.8 degrees Celsius."),
        ("how many ounces in a pound", "1 pound is 16 ounces."),
        ("one and a half cups in millilitres", "1.5 cups is 355 millilitres."),
        ("how many seconds in an hour", "1 hour is 3600 seconds."),
        ("6 feet in metres", "6 feet is 1.83 metres."),
        ("5 miles in kilograms", "I can't convert miles to kilograms: one is a length, the other a mass."),
    ],
)
def test_unit_conversions(said, expected):
    assert answer(said) == expected


def test_repeat_that_says_the_last_reply_again():
    assert answer("repeat that", "It's 3:07 PM.") == "I said: It's 3:07 PM."
    assert answer("Sorry, what?", "It's 3:07 PM.") == "I said: It's 3:07 PM."
    assert answer("say that again") == "I haven't said anything yet."


@pytest.mark.parametrize("said", ["stop", "Stop!", "never mind", "cancel", "be quiet please"])
def test_stop_and_never_mind_are_acknowledged_briefly(said):
    assert answer(said) == "Okay."


@pytest.mark.parametrize(
    "said",
    ["set the volume to 30", "turn the light red", "what time is it", "set a timer for 5 minutes",
     "stop the timer", "my name is Alice", "what is the capital of France", "tell me a story"],
)
def test_other_requests_are_left_to_the_other_intents(said):
    assert answer(said) is None


def test_numbers_are_spoken_briefly():
    assert [spoken(v) for v in (12.0, 2.5, 1 / 3, 8.04672, -2.0)] == ["12", "2.5", "0.333", "8.05", "-2"]


async def test_the_builtin_engine_answers_sums_and_repeats_its_last_reply(agent):
    key = "test:everyday"
    sum_reply = (await agent.process_direct("what is six times seven", session_key=key)).content
    assert sum_reply == "6 times 7 is 42."
    again = (await agent.process_direct("repeat that", session_key=key)).content
    assert again == "I said: 6 times 7 is 42."
