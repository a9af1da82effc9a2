"""The understanding bench's parts can fail: the request set is well formed, the checker (the real built-in
agent) rejects a wrong expectation, WER normalises numbers, noise lands at the asked SNR.

The measured run itself (`run_all.py --quick`, pocketsphinx numbers present) is asserted in
test_bench_smoke.py, which runs it once for every phase.
"""

from __future__ import annotations

import copy
import math
import re

import numpy as np

from tools.bench import understanding
from tools.bench.understanding_check import (
    Request,
    UnderstandingChecker,
    check,
    load_requests,
    normalise,
    word_errors,
)

CATEGORIES = {"timer", "volume", "light", "time", "name", "status", "capabilities", "greeting", "open"}


def test_the_set_covers_every_category_with_well_formed_expectations() -> None:
    requests = load_requests()
    assert len(requests) >= 60
    assert {r.category for r in requests} == CATEGORIES
    assert len({r.text for r in requests}) == len(requests)
    for r in requests:
        assert (r.expect is None) == (r.category == "open"), r
        if r.expect is not None:
            assert set(r.expect) <= {"calls", "reply"} and r.expect, r
            re.compile(r.expect.get("reply", ""))
            assert all(set(c) <= {"tool", "args"} for c in r.expect.get("calls", [])), r
    quick = load_requests(quick=True)
    assert 0 < len(quick) <= 8 and any(not r.judged for r in quick) and any(r.judged for r in quick)


async def _judge(request: Request, heard: str) -> tuple[bool, str]:
    async with UnderstandingChecker() as checker:
        verdict = await checker.judge(request, heard)
    return verdict.understood, verdict.reason


def _request(text: str) -> Request:
    return next(r for r in load_requests() if r.text == text)


async def test_a_right_call_is_understood_and_a_mutated_expectation_is_not() -> None:
    volume = _request("set the volume to thirty")
    assert await _judge(volume, volume.text) == (True, "")
    wrong_value = copy.deepcopy(volume.expect)
    wrong_value["calls"][0]["args"]["volume"] = 31
    understood, reason = await _judge(Request(volume.text, volume.category, expect=wrong_value), volume.text)
    assert not understood and "no call" in reason
    # heard wrong: the agent sets another value, which the checker must not accept either
    assert not (await _judge(volume, "set the volume to forty"))[0]


async def test_a_reply_expectation_and_setup_turns_are_checked() -> None:
    name = _request("what is my name")
    assert (await _judge(name, name.text))[0]
    mutated = Request(name.text, name.category, setup=name.setup, expect={"reply": r"Your name is Bob\b"})
    assert not (await _judge(mutated, name.text))[0]
    no_setup = Request(name.text, name.category, expect=name.expect)
    assert not (await _judge(no_setup, name.text))[0]  # nobody told it the name


def test_checker_rules_without_the_agent() -> None:
    louder = {"calls": [{"tool": "self.audio_speaker.set_volume", "args": {"volume": {"min": 71}}}]}
    status = ("self.get_device_status", {})
    assert check(louder, "Done.", [status, ("self.audio_speaker.set_volume", {"volume": 80})])[0]
    assert not check(louder, "Done.", [("self.audio_speaker.set_volume", {"volume": 60})])[0]
    light = ("self.light.set_rgb", {"r": 255, "g": 0, "b": 0})
    assert not check(louder, "Done.", [light, ("self.audio_speaker.set_volume", {"volume": 80})])[0]
    assert not check({"reply": "welcome"}, "You're welcome.", [light])[0]  # changed something unasked
    assert not check({"reply": "."}, "Sorry, I don't understand that yet.", [])[0]


def test_wer_normalises_numbers_and_punctuation_on_both_sides() -> None:
    assert normalise("Set the volume to 85%!") == normalise("set the volume to eighty five percent")
    assert normalise("What's the date today?") == ["what", "is", "the", "date", "today"]
    assert normalise("one hundred twenty") == ["120"] and normalise("two three") == ["2", "3"]
    assert word_errors(normalise("turn the light red"), normalise("turn the lights red please")) == 2


def test_noise_is_at_the_asked_snr_and_repeatable() -> None:
    t = np.arange(16000 * 2) / 16000
    speech = (3000 * np.sin(2 * np.pi * 220 * t)).astype("<i2")
    pcm = np.concatenate([np.zeros(4800, "<i2"), speech, np.zeros(4800, "<i2")]).tobytes()
    noisy = understanding.with_noise(pcm, 20.0, seed=5)
    assert noisy == understanding.with_noise(pcm, 20.0, seed=5)
    noise = np.frombuffer(noisy, "<i2").astype(float) - np.frombuffer(pcm, "<i2")
    snr = 20 * math.log10(understanding.speech_rms(speech) / np.sqrt((noise**2).mean()))
    assert abs(snr - 20.0) < 0.5, snr
