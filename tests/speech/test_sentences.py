from __future__ import annotations

import pytest
from wren.speech.sentences import SentenceSplitter, clean_for_speech


def split(text: str, step: int | None = None, **kw) -> list[str]:
    """Feed `text` in deltas of `step` characters (None: one delta), then flush."""
    splitter = SentenceSplitter(**kw)
    out: list[str] = []
    deltas = [text] if step is None else [text[i : i + step] for i in range(0, len(text), step)]
    for delta in deltas:
        out += splitter.feed(delta)
    return out + splitter.flush()


@pytest.mark.parametrize("step", [None, 1, 3, 7])
def test_first_clause_is_released_early_then_whole_sentences(step):
    text = "Well, the weather today is sunny, with a light breeze. Tomorrow, it will rain. Take an umbrella!"
    assert split(text, step) == [
        "Well, the weather today is sunny,",
        "with a light breeze.",
        "Tomorrow, it will rain.",
        "Take an umbrella!",
    ]


def test_first_clause_is_released_before_the_sentence_ends():
    splitter = SentenceSplitter()
    assert splitter.feed("Sure thing, I will set") == ["Sure thing,"]
    assert splitter.feed(" a timer") == []
    assert splitter.feed(" for you. Done") == ["I will set a timer for you."]
    assert splitter.flush() == ["Done"]


def test_a_too_short_first_clause_waits_for_more():
    assert split("Yes, it is raining now. Bye.") == ["Yes, it is raining now.", "Bye."]


@pytest.mark.parametrize("step", [None, 1, 2])
def test_decimals_times_and_thousands_are_never_split(step):
    text = "It costs 3.5 dollars at 10:30 for 1,000 people. That is all."
    # first_max_words=0: only the punctuation rules here (a long streamed first sentence is cut by words)
    assert split(text, step, first_max_words=0) == [
        "It costs 3.5 dollars at 10:30 for 1,000 people.", "That is all."]


@pytest.mark.parametrize("step", [None, 1])
def test_abbreviations_and_initials_do_not_end_sentences(step):
    text = "I met Mr. Smith and Dr. Jones, e.g. at the U.S. office. J. R. R. Tolkien wrote it. Next one."
    assert split(text, step, first_min_chars=100, first_max_words=0) == [
        "I met Mr. Smith and Dr. Jones, e.g. at the U.S. office.",
        "J. R. R. Tolkien wrote it.",
        "Next one.",
    ]


@pytest.mark.parametrize("step", [None, 1])
def test_numbered_list_items_are_not_split_after_their_number(step):
    text = "Here is how:\n1. Preheat the oven.\n2. Bake for 20 minutes.\n"
    assert split(text, step) == ["Here is how:", "1. Preheat the oven.", "2. Bake for 20 minutes."]


def test_no_and_unicode_ellipsis_end_sentences():
    assert split("The answer is no. Try again… Later.", first_min_chars=100) == [
        "The answer is no.",
        "Try again…",
        "Later.",
    ]


def test_a_sentence_end_waits_for_the_next_character():
    splitter = SentenceSplitter()
    assert splitter.feed("The answer is 3.") == []  # could still become 3.5
    assert splitter.feed("5 exactly. Then") == ["The answer is 3.5 exactly."]


def test_question_and_exclamation_runs_and_closing_quotes_stay_with_the_sentence():
    assert split('He asked "really?!" Then he left... Okay.', first_min_chars=100) == [
        'He asked "really?!"',
        "Then he left...",
        "Okay.",
    ]


def test_semicolons_colons_and_line_breaks_end_chunks():
    assert split("First part; second part: third part\nfourth part", first_min_chars=100) == [
        "First part;",
        "second part:",
        "third part",
        "fourth part",
    ]


@pytest.mark.parametrize("step", [None, 1])
def test_cjk_sentences_split_without_spaces(step):
    assert split("今天天气很好。我们去公园吧！好吗？", step, first_min_chars=2) == [
        "今天天气很好。",
        "我们去公园吧！",
        "好吗？",
    ]


def test_flush_returns_the_rest_and_resets():
    splitter = SentenceSplitter()
    splitter.feed("no punctuation at all")
    assert splitter.flush() == ["no punctuation at all"]
    assert splitter.flush() == []


def test_a_new_reply_after_flush_gets_an_early_first_clause_again():
    splitter = SentenceSplitter()
    splitter.feed("Okay, done. Another sentence here. ")
    splitter.flush()
    assert splitter.feed("Certainly, my friend, ") == ["Certainly,"]


def test_very_long_text_without_punctuation_is_cut_at_a_space():
    text = " ".join(["word"] * 100)
    chunks = split(text, 5, max_chars=60)
    assert all(len(c) <= 60 for c in chunks)
    assert " ".join(chunks) == text  # nothing lost, no word cut


def test_markup_only_chunks_are_dropped():
    assert split("**Note:** ... --- Okay, fine.", first_min_chars=1) == ["**Note:**", "--- Okay, fine."]


def test_clean_for_speech_strips_markdown_and_emoji():
    text = (
        "## Today\n"
        "- **Sunny** and *warm* 😀👍🏽\n"
        "- see [the forecast](https://example.com/f) or https://example.com\n"
        "```python\nprint('hi')\n```\n"
        "Use `wren serve` ~~now~~."
    )
    assert clean_for_speech(text) == "Today. Sunny and warm. see the forecast or. Use wren serve now."


def test_clean_for_speech_handles_underscore_emphasis_but_keeps_snake_case():
    assert clean_for_speech("It is _really_ warm in living_room") == "It is really warm in living_room"


def test_clean_for_speech_keeps_words_numbers_and_cjk():
    assert clean_for_speech("It is 21.5°C, 50% humidity; 你好！") == "It is 21.5°C, 50% humidity; 你好！"
    assert clean_for_speech("| a | b |\n|---|---|\n| 1 | 2 |") == "a, b. 1, 2"
    assert clean_for_speech("🎉🎉") == ""


@pytest.mark.parametrize("step", [1, 3])
def test_a_long_streamed_first_sentence_without_a_comma_is_released_after_eight_words(step):
    text = "The quick brown fox jumps over the lazy dog every single morning. It is fast."
    assert split(text, step) == [
        "The quick brown fox jumps over the lazy",
        "dog every single morning.",
        "It is fast.",
    ]


def test_the_early_cut_prefers_the_start_of_a_phrase():
    splitter = SentenceSplitter()
    assert splitter.feed("It costs 3.5 dollars at 10:30 for 1,000 ") == ["It costs 3.5 dollars at 10:30"]
    assert splitter.feed("people. Then") == ["for 1,000 people."]


def test_the_early_cut_waits_for_the_eighth_word_to_be_complete():
    splitter = SentenceSplitter()
    assert splitter.feed("one two three four five six seven eigh") == []
    assert splitter.feed("t ") == ["one two three four five six seven eight"]


@pytest.mark.parametrize("text", [
    "The quick brown fox jumps over the lazy dog every single morning. It is fast.",  # whole: not cut
    "Sure thing, the quick brown fox jumps over the lazy dog every morning.",  # a clause came first
])
def test_a_first_sentence_that_is_already_whole_or_has_a_clause_keeps_its_prosody(text):
    first = split(text)[0]
    assert first.endswith((".", ","))


def test_only_the_first_chunk_is_cut_by_words():
    splitter = SentenceSplitter()
    assert splitter.feed("Yes. ") == ["Yes."]
    assert splitter.feed("the quick brown fox jumps over the lazy dog every single ") == []


def test_clock_times_are_said_as_people_say_them():
    # piper reads "6:07" as "six zero seven", which the recogniser (and people) mishear as "at six zero".
    assert clean_for_speech("It's 6:07 PM.") == "It's 6 oh 7 PM."
    assert clean_for_speech("It's 6:45 PM.") == "It's 6 45 PM."
    assert clean_for_speech("It's 7:00 AM. Time to wake up.") == "It's 7 AM. Time to wake up."
    assert clean_for_speech("The train leaves at 18:00.") == "The train leaves at 18 hundred."
    untouched = "It ran 10:30:15 and the score was 3:2."
    assert clean_for_speech(untouched) == untouched
