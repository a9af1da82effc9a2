"""Recognition biased toward what Wren can act on: phrase sets, candidates, rescoring, the session path."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from wren.agent.vocabulary import MAX_PHRASES, recognition_phrases
from wren.config import AsrConfig, VadConfig
from wren.pipeline.turn_detection import ListenMode
from wren.pipeline.uplink import Uplink, utterance_of
from wren.speech.asr import load_asr
from wren.speech.asr.bias import STRONG_MARGIN, WEAK_MARGIN, PhraseBias, margin_for
from wren.speech.asr.grammar import MAX_TEMPLATE_CHARS, is_template
from wren.speech.codec import make_decoder
from wren.tools.spec import ToolSpec

from tests.speech.conftest import recognise, spoken

LIGHT_TOOL = ToolSpec(
    "self.kitchen_light.turn_on",
    "Turn on the kitchen light. The mode can be `bright` or `cosy`.",
    {"type": "object", "properties": {"mode": {"type": "string", "enum": ["bright", "cosy"]}}},
)


@pytest.fixture(scope="module")
def moonshine():
    engine = load_asr(AsrConfig(engine="moonshine"))
    yield engine
    engine.close()


def biased(engine, pcm: bytes, phrases: tuple[str, ...], margin: float = STRONG_MARGIN) -> str:
    stream = engine.open_stream()
    stream.bias(phrases, margin)
    try:
        stream.accept(pcm)
        return stream.finish()
    finally:
        stream.close()


def test_the_phrase_set_holds_taught_names_intents_and_the_devices_tool_words():
    phrases = recognition_phrases([LIGHT_TOOL], taught_names=["Siobhan"])
    assert phrases[0] == "Siobhan"
    assert "what time is it" in phrases
    assert {"kitchen light turn on", "mode", "bright", "cosy"} <= set(phrases)


def test_a_hostile_tool_list_gives_a_bounded_phrase_set():
    schema = {"type": "object", "properties": {f"p{j}": {} for j in range(50)}}
    tools = [ToolSpec(f"self.tool_{i}", "x", schema) for i in range(2000)]
    phrases = recognition_phrases(tools)
    assert len(phrases) == MAX_PHRASES
    assert all(len(p) <= (MAX_TEMPLATE_CHARS if is_template(p) else 60) for p in phrases)


def test_bias_strength_is_strong_for_the_builtin_agent_and_weak_for_an_llm():
    assert margin_for("auto", "builtin") == STRONG_MARGIN
    assert margin_for("auto", "openai") == margin_for("weak", "builtin") == WEAK_MARGIN
    assert margin_for("off", "builtin") == 0.0


def test_candidates_replace_near_miss_words_but_never_known_or_function_words():
    bias = PhraseBias(["turn on the kitchen light", "set the theme to dark"])
    assert [c.text for c in bias.candidates("Purn on the kitchen light.")] == ["Turn on the kitchen light."]
    assert bias.candidates("Set the theme to dark.") == []
    assert bias.candidates("Tell me a story about dragons.") == []
    # what the decoder ranked high at a word's start is a candidate even when the spelling is far off
    assert [c.text for c in bias.candidates("Said the theme to dark.", {0: {"set"}})] == [
        "Set the theme to dark."
    ]


def test_a_near_miss_of_a_device_command_is_recognised_as_the_command(moonshine):
    pcm = spoken("turn on the kitchen light")
    assert recognise(moonshine, pcm) == "Purn on the kitchen light."  # the open recogniser's slip
    phrases = recognition_phrases([LIGHT_TOOL])
    assert biased(moonshine, pcm, phrases) == "Turn on the kitchen light."


def test_a_word_the_model_heard_as_second_choice_is_taken_from_the_phrase_set(moonshine):
    pcm = spoken("set a pasta timer")
    assert recognise(moonshine, pcm).startswith("Said")
    assert biased(moonshine, pcm, ("set a pasta timer",)).startswith("Set a pasta")


def test_open_questions_stay_as_heard(moonshine):
    phrases = recognition_phrases([LIGHT_TOOL])
    for sentence, heard in [("why is the sky blue", "Why is the sky blue?"),
                            ("tell me a story about dragons", "Tell me a story about dragons.")]:
        assert biased(moonshine, spoken(sentence), phrases, WEAK_MARGIN) == heard
        assert biased(moonshine, spoken(sentence), phrases, STRONG_MARGIN) == heard


def test_the_uplink_hands_the_sessions_phrase_set_to_the_recogniser(silero_vad, moonshine):
    speech = SimpleNamespace(vad=silero_vad, asr=moonshine)
    uplink = Uplink(speech, VadConfig(), make_decoder("pcm", 16000), 16000, ListenMode.MANUAL, "kitchen",
                    bias=lambda: (recognition_phrases([LIGHT_TOOL]), STRONG_MARGIN))
    pcm = spoken("turn on the kitchen light")
    for i in range(0, len(pcm), 1920):
        uplink.feed_run([pcm[i : i + 1920]])
    assert utterance_of(uplink.end()).text == "Turn on the kitchen light."
    uplink.close()


def test_function_words_are_never_replaced_even_when_the_model_hesitated():
    bias = PhraseBias(["set the theme to dark"])
    assert bias.candidates("What is the value?", {2: {"theme"}}) == []


def _pocketsphinx_words(engine, text: str, margin: float | None) -> str:
    stream = engine.open_stream()
    try:
        if margin is not None:
            stream.bias(recognition_phrases(), margin)
        stream.accept(spoken(text))
        return stream.finish()
    finally:
        stream.close()


def test_pocketsphinx_takes_the_hypothesis_of_its_n_best_with_more_words_wren_can_act_on(pocketsphinx_engine):
    assert _pocketsphinx_words(pocketsphinx_engine, "goodbye", None) == "the bike"
    assert _pocketsphinx_words(pocketsphinx_engine, "goodbye", STRONG_MARGIN) == "goodbye"
    assert _pocketsphinx_words(pocketsphinx_engine, "goodbye", 0.0) == "the bike"  # bias off


def test_pocketsphinx_keeps_open_questions_as_heard(pocketsphinx_engine):
    for sentence in ("why is the sky blue", "tell me a joke"):
        assert _pocketsphinx_words(pocketsphinx_engine, sentence, STRONG_MARGIN) == sentence


def test_a_whole_phrase_set_sentence_is_a_candidate_with_the_numbers_that_were_heard():
    bias = PhraseBias(recognition_phrases())
    texts = [c.text for c in bias.sentence_candidates("Saint-Namal Yun-tah-50.")]
    assert texts[0] == "Set the volume to 50."
    assert bias.sentence_candidates("Set the volume to thirty.") == []  # phrase-set words already


def test_the_greedy_searchs_miss_is_found_among_the_phrase_set_sentences(moonshine):
    """espeak-ng's "set the volume to fifty": greedy decoding writes nonsense, yet the model itself finds the
    phrase-set sentence more likely on the same audio."""
    from tools.bench.understanding import espeak_pcm, voice_status

    if voice_status("espeak") != "available":
        pytest.skip("espeak-ng is not installed (make installs it)")
    pcm = espeak_pcm("set the volume to fifty")
    assert "volume" not in recognise(moonshine, pcm).lower()
    assert biased(moonshine, pcm, recognition_phrases()) == "Set the volume to 50."


def _espeak(text: str) -> bytes:
    from tools.bench.understanding import espeak_pcm, voice_status

    if voice_status("espeak") != "available":
        pytest.skip("espeak-ng is not installed (make installs it)")
    return espeak_pcm(text)


def test_a_command_the_open_search_mishears_is_found_by_the_grammar(moonshine):
    """espeak-ng's "mute the speaker" is "New to the speaker." to the open search; constrained to the
    commands, the same model finds "Mute the speaker." within the margin."""
    from tests.agent.fakes import XIAOZHI_TOOLS

    pcm = _espeak("mute the speaker")
    tools = [ToolSpec.from_mcp(spec, "device") for spec in XIAOZHI_TOOLS]
    assert "mute" not in recognise(moonshine, pcm).lower()
    assert biased(moonshine, pcm, recognition_phrases(tools)).lower().startswith("mute the speaker")


def test_with_an_llm_engine_the_grammar_is_not_used(moonshine):
    pcm = _espeak("mute the speaker")
    assert "mute" not in biased(moonshine, pcm, recognition_phrases(), WEAK_MARGIN).lower()


def test_open_questions_are_not_forced_into_a_command(moonshine):
    for sentence in ("why is the sky blue", "what is the capital of france"):
        heard = biased(moonshine, spoken(sentence), recognition_phrases())
        assert plain_words(heard) == sentence, heard


def plain_words(text: str) -> str:
    import re

    return " ".join(re.sub(r"[^\w' ]+", " ", text.lower()).split())
