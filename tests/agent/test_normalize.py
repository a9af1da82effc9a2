"""Text normalisation and the pure matching helpers (wren.agent.nlu)."""

from __future__ import annotations

import time

import pytest
from wren.agent.nlu import (
    CANCEL,
    fuzzy_intent,
    normalize,
    normalize_words,
    number_value,
    parse_relative_change,
    phonetic_key,
    resolve_clarification,
)
from wren.agent.nlu.normalize import MAX_CHARS, MAX_WORDS
from wren.agent.nlu.relative import RelativeChange, new_value, read_value


@pytest.mark.parametrize(
    ("said", "normal"),
    [
        ("Set the volume to Seventy-Five%.", "set the volume to 75 percent"),
        ("set the volume to seventy five per cent", "set the volume to 75 percent"),
        ("one hundred and twenty", "120"),
        ("a hundred", "100"),
        ("hundred percent", "100 percent"),
        ("two point five", "2.5"),
        ("zero point five", "0.5"),
        ("twenty-one", "21"),
        ("two thousand and five", "2005"),
        ("a thousand and one nights", "1001 nights"),
        ("nineteen hundred", "1900"),
        ("5 thousand", "5000"),
        ("1,000,000 and 1,2,3", "1000000 and 1 2 3"),
        ("it costs 2.50.", "it costs 2.50"),
        ("the thirtieth of June", "the 30th of june"),
        ("the fifth element", "the 5th element"),
        ("march first", "march 1st"),
        ("the third of may", "the 3rd of may"),
        ("the twenty first century", "the 21st century"),
        ("nine one one", "911"),
        ("one oh one", "101"),
    ],
)
def test_spelled_numbers_become_digits(said: str, normal: str) -> None:
    assert normalize(said) == normal


@pytest.mark.parametrize(
    ("said", "normal"),
    [
        ("first call the status tool", "first call the status tool"),  # "first" is not a number here
        ("wait a second", "wait a second"),
        ("set a twenty second timer", "set a 20 second timer"),  # 20 seconds, not the 22nd
        ("turn on the one in the kitchen", "turn on the one in the kitchen"),
        ("one of the lights", "one of the lights"),
        ("set a timer for one minute", "set a timer for 1 minute"),
        ("oh set the volume to five", "oh set the volume to 5"),  # "oh" is zero only inside digits
        ("too to for four", "too to for 4"),  # prepositions stay words
        ("two thirty", "2 30"),  # words that cannot continue a number end it
    ],
)
def test_words_that_only_look_like_numbers_stay_words(said: str, normal: str) -> None:
    assert normalize(said) == normal


@pytest.mark.parametrize(
    ("said", "normal"),
    [
        ("What's the time?", "what is the time"),
        ("I'm here, don't go", "i am here do not go"),
        ("whats the time", "what is the time"),
        ("it's six o'clock", "it is 6 oclock"),
        ("let's go at 3:30 p.m.", "let us go at 3:30 pm"),
        ("what's today's date", "what is today date"),
        ("I can't, it won't", "i can not it will not"),
        ("what\u2019s the time", "what is the time"),  # a curly apostrophe
        ("salt & pepper", "salt and pepper"),
        ("Caf\u00e9 na\u00efve", "cafe naive"),
    ],
)
def test_case_punctuation_and_contractions_are_folded(said: str, normal: str) -> None:
    assert normalize(said) == normal


def test_british_and_us_spellings_fold_to_the_british_form() -> None:
    assert normalize("Color gray meters liters center favorite colors") == normalize(
        "colour grey metres litres centre favourite colours"
    )
    assert normalize("colour grey metre") == "colour grey metre"
    assert normalize("recognize organized") == "recognise organised"
    assert normalize("size prize") == "size prize"  # no blanket -ize rule


def test_number_slips_are_fixed_before_reading_numbers() -> None:
    assert normalize("set the volum to thirdy five") == "set the volum to 35"
    assert normalize("fourty two") == "42"


def test_normalisation_is_idempotent() -> None:
    for text in ("Set the volume to Seventy-Five%.", "What's the date, March 1st?", "the 21st century"):
        assert normalize(normalize(text)) == normalize(text)


def test_the_input_is_bounded() -> None:
    huge = "set the volume to thirty " + "blah " * 20000
    started = time.perf_counter()
    words = normalize_words(huge)
    assert time.perf_counter() - started < 0.5
    assert words[:5] == ["set", "the", "volume", "to", "30"]
    assert len(words) <= MAX_WORDS and len(" ".join(words)) <= MAX_CHARS


@pytest.mark.parametrize(
    ("text", "value"),
    [("75", 75), ("75%", 75), ("2.5", 2.5), ("seventy five", 75), ("a hundred", 100), ("twenty-one", 21),
     ("1,000", 1000), ("volume", None), ("two three", None)],
)
def test_number_value_reads_one_number_written_any_way(text: str, value: float | None) -> None:
    assert number_value(text) == value


def test_sound_alike_keys_merge_what_recognisers_confuse() -> None:
    assert phonetic_key("date") == phonetic_key("that") == phonetic_key("they") == phonetic_key("the")
    assert phonetic_key("time") == phonetic_key("thyme") == phonetic_key("tame")
    assert phonetic_key("phone") == phonetic_key("fone")
    assert phonetic_key("time") != phonetic_key("date")


@pytest.mark.parametrize(
    ("heard", "intent"),
    [("what is my main", "ask_name"), ("please tell me that they", "date"), ("what dime is it", "time"),
     ("what is the day", "date"), ("what can you too", "capability"), ("what am i cold", "ask_name")],
)
def test_fuzzy_intent_absorbs_recogniser_slips(heard: str, intent: str) -> None:
    assert fuzzy_intent(normalize_words(heard)).intent == intent


@pytest.mark.parametrize(
    "said",
    ["tell me a story", "tell me a joke", "what is that", "what is it", "what is the weather", "where am i",
     "how are you", "what is the rate", "what is my age", "what is the capital of france",
     "what is my mane hair colour"],
)
def test_fuzzy_intent_leaves_unrelated_sentences_alone(said: str) -> None:
    guess = fuzzy_intent(normalize_words(said))
    assert guess.intent is None and not guess.options


def test_fuzzy_intent_offers_two_close_intents() -> None:
    assert set(fuzzy_intent(normalize_words("whats the dame")).options) == {"time", "date"}


@pytest.mark.parametrize(
    ("answer", "picked"),
    [("the date", "date"), ("time", "time"), ("that they", "date"), ("the first one", "time"),
     ("the second", "date"), ("neither", CANCEL), ("no thanks", CANCEL),
     ("set the volume to 20", None), ("hello", None)],
)
def test_an_answer_to_a_clarifying_question_picks_an_option(answer: str, picked: str | None) -> None:
    assert resolve_clarification(normalize_words(answer), ["time", "date"]) == picked


@pytest.mark.parametrize(
    ("said", "change"),
    [
        ("louder", RelativeChange("volume", 1, 20)),
        ("a bit louder", RelativeChange("volume", 1, 10)),
        ("turn it up", RelativeChange("volume", 1, 20)),
        ("turn the volume down", RelativeChange("volume", -1, 20)),
        ("quieter please", RelativeChange("volume", -1, 20)),
        ("a little brighter", RelativeChange("brightness", 1, 10)),
        ("dim the screen", RelativeChange("brightness", -1, 20)),
        ("turn the volume up by five", RelativeChange("volume", 1, 5)),
        ("volum up", RelativeChange("volume", 1, 20)),
        ("turn the volume up to 80", None),  # absolute
        ("turn up the heat", None),
        ("what is up", None),
        ("tell me more", None),
        ("how bright is the screen", None),
    ],
)
def test_relative_changes_are_understood(said: str, change: RelativeChange | None) -> None:
    assert parse_relative_change(normalize_words(said)) == change


def test_relative_change_reads_json_status_and_clamps() -> None:
    status = '{"audio_speaker": {"volume": 70}, "screen": {"brightness": 75}}'
    assert read_value(status, "volume") == 70
    assert read_value(status, "brightness") == 75
    assert read_value("42", "volume") == 42
    assert read_value("not json", "volume") is None
    assert new_value(95, RelativeChange("volume", 1, 20), {"maximum": 100}) == 100
    assert new_value(5, RelativeChange("volume", -1, 10), {}) == 0
    assert new_value(200, RelativeChange("brightness", 1, 20), {"minimum": 0, "maximum": 255}) == 220
