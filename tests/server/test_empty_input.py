"""The empty-input rule on the wire, and the rule itself (hub decides, NLG renders)."""

from __future__ import annotations

import pytest
from wren.agent.engines.base import render_empty_prompt
from wren.pipeline.turn_decision import EmptyInputRule, EmptyKind, GiveUp, Prompt, Silence
from wren.pipeline.turn_detection import ListenMode

from tests.support.device import TestDevice


@pytest.fixture(scope="module")
def quick_server(start_server):
    return start_server(vad={"no_speech_timeout_s": 1.0})


async def test_manual_press_without_speech_prompts_once_per_press(quick_server):
    async with TestDevice(quick_server.ws_url, mcp=False) as dev:
        await dev.connect()
        for _ in range(2):
            await dev.listen_start("manual")
            await dev.stream_silence(600)
            await dev.listen_stop()
            reply = await dev.next_reply(timeout=30)
            assert reply.stt is None  # nothing was heard, so nothing is shown as said
            assert reply.text == render_empty_prompt("manual", 1)
            assert reply.frames


async def test_auto_silence_waits_quietly_then_gives_up_and_closes(quick_server):
    async with TestDevice(quick_server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.listen_start("auto")
        # Three no-speech windows of 1 s: two silent waits, then the farewell and a close.
        for _ in range(80):
            if dev.closed.is_set() or any(r.msg and r.msg.get("type") == "tts" for r in dev.received):
                break
            await dev.stream_silence(120)
        reply = await dev.next_reply(timeout=30)
        assert reply.text == render_empty_prompt("silence", 3)
        assert sum(1 for m in dev.json_messages() if m.get("type") == "tts" and m["state"] == "start") == 1
        code, reason = await dev.wait_closed(10)
        assert code == 1000 and "no speech" in reason


async def test_wake_word_then_nothing_gets_the_wake_prompt(quick_server):
    async with TestDevice(quick_server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.detect("你好小智")
        await dev.listen_start("auto")
        for _ in range(40):
            if any(r.msg and r.msg.get("type") == "tts" for r in dev.received):
                break
            await dev.stream_silence(120)
        reply = await dev.next_reply(timeout=30)
        assert reply.text == render_empty_prompt("wake", 1)


def test_rule_of_three_resets_on_real_input():
    rule = EmptyInputRule()
    kind = rule.classify(ListenMode.AUTO, heard_speech=False)
    assert kind is EmptyKind.NO_SPEECH
    assert rule.decide(kind, armed_by_wake=False) == Silence()
    assert rule.decide(kind, armed_by_wake=False) == Silence()
    rule.real_input()
    assert rule.decide(kind, armed_by_wake=False) == Silence()
    assert rule.decide(kind, armed_by_wake=False) == Silence()
    assert rule.decide(kind, armed_by_wake=False) == GiveUp("silence", 3)


def test_speech_without_words_is_prompted_with_growing_count():
    rule = EmptyInputRule()
    kind = rule.classify(ListenMode.REALTIME, heard_speech=True)
    assert kind is EmptyKind.NO_TEXT
    assert [rule.decide(kind, False) for _ in range(3)] == [Prompt("silence", 1), Prompt("silence", 2),
                                                              GiveUp("silence", 3)]


def test_manual_prompts_every_empty_press_and_never_gives_up():
    rule = EmptyInputRule()
    kind = rule.classify(ListenMode.MANUAL, heard_speech=True)
    assert kind is EmptyKind.MANUAL_PRESS
    assert {rule.decide(kind, False) for _ in range(5)} == {Prompt("manual", 1)}


def test_listening_armed_by_a_wake_word_prompts_with_the_wake_wording():
    rule = EmptyInputRule()
    assert rule.decide(EmptyKind.NO_SPEECH, armed_by_wake=True) == Prompt("wake", 1)
