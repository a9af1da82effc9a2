"""`[limits] reply_chars`, `llm_max_tokens`, `turn_deadline_s` (docs/server.md "Limits"): an LLM that
never stops is still cut.

First the cut itself (`cut_at_boundary`, `ReplyBudget`), then an agent against the local OpenAI-compatible
server (tests/agent/llm_server.py) streaming without end, then the real Wren server: a device asking that
LLM gets `tts start` … `tts stop` in bounded time and at most `reply_chars` of text, while another device
is answered as usual.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from wren.agent.loop import AgentLoop
from wren.agent.turn import ReplyBudget, cut_at_boundary
from wren.config import Config, load_config

from tests.agent.llm_server import ScriptedLLM, endless_chunks, text_chunks
from tests.server.conftest import ServerThread
from tests.server.helpers import assert_complete_reply
from tests.support.device import TestDevice
from tests.support.own_loop import on_own_loop

# ---- the cut -----------------------------------------------------------------------------------------


def test_a_short_reply_is_not_cut():
    assert cut_at_boundary("Hello there.", 100) == "Hello there."
    assert cut_at_boundary("x" * 5000, 0) == "x" * 5000  # 0 = no limit


def test_a_long_reply_is_cut_after_its_last_sentence_that_fits():
    text = "First one. Second one here. Third sentence is long."
    assert cut_at_boundary(text, 40) == "First one. Second one here."
    assert cut_at_boundary('He said "no." Then he left.', 20) == 'He said "no."'


def test_a_cut_falls_back_to_a_word_boundary_when_the_last_sentence_end_is_far_back():
    text = "Yes. " + " ".join(["word"] * 40)
    cut = cut_at_boundary(text, 50)
    assert len(cut) <= 50 and cut.endswith("word") and text.startswith(cut) and len(cut) > 40


def test_a_cut_never_splits_a_word_or_a_number():
    assert cut_at_boundary("it costs 3.5 dollars today", 11) == "it costs"  # "3." is not a sentence end
    assert cut_at_boundary("I really don't know", 13) == "I really"
    assert cut_at_boundary("alpha beta gamma", 12) == "alpha beta"


def test_a_cut_without_any_boundary_is_hard_unless_told_otherwise():
    assert cut_at_boundary("x" * 50, 10) == "x" * 10
    assert cut_at_boundary("x" * 50, 10, hard=False) == ""


def test_cjk_text_is_cut_at_a_full_stop_or_between_characters():
    assert cut_at_boundary("你好。我很好。谢谢你的问题。", 9) == "你好。我很好。"
    assert cut_at_boundary("这是一个很长的句子没有标点", 5) == "这是一个很"


def _feed(budget: ReplyBudget, pieces: list[str]) -> list[str]:
    out = [budget.take(p) for p in pieces]
    out.append(budget.rest(complete=True))
    return out


def test_the_budget_passes_text_on_as_it_comes_far_from_the_limit():
    budget = ReplyBudget(2000)
    assert budget.take("Hello, wor") == "Hello, wor"  # chunked as the engine wrote it
    assert budget.take("ld. How") == "ld. How"
    assert budget.rest(complete=True) == "" and not budget.full


def test_the_budget_holds_only_the_unfinished_sentence_near_the_limit():
    budget = ReplyBudget(100)  # the last 50 characters are the stretch
    assert budget.take("x" * 60 + " First. Sec") == "x" * 60 + " First."
    assert budget.take("ond one") == ""
    assert budget.rest(complete=True) == " Second one"


def test_the_budget_cuts_a_streamed_reply_at_a_sentence_end_and_never_takes_text_back():
    sentence = " One more sentence."  # 19 characters
    text = sentence * 50
    for step in (1, 3, 7, 19, 40):
        budget = ReplyBudget(120)
        pieces = [text[i : i + step] for i in range(0, len(text), step)]
        given = "".join(_feed(budget, pieces))
        assert budget.full and len(given) <= 120
        assert text.startswith(given) and given.endswith("sentence.")
        assert len(given) > 120 - 19 - 1, (step, given)  # the last sentence end that fits


def test_the_budget_ends_at_a_word_when_there_is_no_sentence_end():
    text = " and so on" * 100
    budget = ReplyBudget(100)
    given = "".join(_feed(budget, [text[i : i + 4] for i in range(0, len(text), 4)]))
    assert budget.full and 90 < len(given) <= 100 and given.endswith("on") and text.startswith(given)


def test_the_budget_stopped_mid_word_keeps_whole_words_only():
    budget = ReplyBudget(40)
    assert budget.take("Yes. We were talking abo") == "Yes."
    assert budget.rest(complete=False) == " We were talking "


def test_no_budget_passes_everything_at_once():
    budget = ReplyBudget(0)
    assert budget.take("abc") == "abc" and budget.take(" de") == " de" and not budget.full


def test_the_limits_have_defaults_and_environment_overrides():
    assert (Config().limits.reply_chars, Config().limits.llm_max_tokens) == (2000, 512)
    assert Config().limits.turn_deadline_s == 60.0
    config = load_config(env={"WREN_LIMITS_REPLY_CHARS": "300", "WREN_LIMITS_LLM_MAX_TOKENS": "0",
                              "WREN_LIMITS_TURN_DEADLINE_S": "2.5"})
    assert (config.limits.reply_chars, config.limits.llm_max_tokens, config.limits.turn_deadline_s) == (
        300, 0, 2.5)


# ---- an agent against an endless LLM -------------------------------------------------------------------


async def _agent(tmp_path: Path, llm: ScriptedLLM, **limits: Any) -> AgentLoop:
    config = Config()
    config.server.data_dir = str(tmp_path)
    config.agent.engine = "openai"
    config.agent.openai_base_url = llm.base_url
    config.agent.openai_timeout_s = 5.0
    for key, value in limits.items():
        setattr(config.limits, key, value)
    agent = AgentLoop.from_config(config)
    await agent.start()
    return agent


async def _until(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.05)


async def test_an_endless_reply_is_cut_at_reply_chars_and_the_stream_closed(tmp_path, llm):
    llm.script = lambda body: endless_chunks(" One more sentence.")
    agent = await _agent(tmp_path, llm, reply_chars=200, llm_max_tokens=64, turn_deadline_s=0)
    try:
        reply = (await asyncio.wait_for(agent.process_direct("talk", session_key="chat:a"), 10)).content
        assert 150 < len(reply) <= 200 and reply.endswith("sentence.")
        assert llm.requests[0]["max_tokens"] == 64
        await _until(lambda: llm.closed_by_client == 1, 5, "the LLM's stream closed by the engine")
        history, _ = await agent.store.load("chat:a", "openai")
        assert [r.content for r in history] == ["talk", reply]  # what was said stands
    finally:
        await agent.close()


async def test_an_endless_reply_ends_at_the_deadline_with_what_was_said(tmp_path, llm):
    llm.script = lambda body: endless_chunks(" and so on", delay=0.01)
    agent = await _agent(tmp_path, llm, reply_chars=0, llm_max_tokens=0, turn_deadline_s=1.0)
    try:
        started = time.monotonic()
        reply = (await asyncio.wait_for(agent.process_direct("talk", session_key="chat:b"), 10)).content
        assert 0.9 <= time.monotonic() - started < 3.0
        assert reply.startswith(" and so on") and reply.endswith("on")  # whole words only
        assert "max_tokens" not in llm.requests[0]  # 0 = not sent
        await _until(lambda: llm.closed_by_client == 1, 5, "the LLM's stream closed by the engine")
        history, _ = await agent.store.load("chat:b", "openai")
        assert [r.content for r in history] == ["talk", reply]
    finally:
        await agent.close()


# ---- the real server ------------------------------------------------------------------------------------

DEADLINE_S = 3.0
REPLY_CHARS = 120
SLOW = " Still going."  # one short sentence a second: speech keeps up, so the deadline is what ends it


def _script(body: dict[str, Any]) -> Any:
    asked = body["messages"][-1]["content"]
    if asked == "keep talking":
        return endless_chunks(SLOW, delay=1.0)
    if asked == "tell me everything":
        return endless_chunks(" One more sentence.")  # as fast as it can: reply_chars ends it
    return text_chunks("Hello", " there, nice", " to meet you.")


@pytest.fixture(scope="module")
def endless_llm() -> Iterator[ScriptedLLM]:
    """The fake LLM on a loop of its own, so that the Wren server's thread reaches it as a real endpoint."""
    llm = ScriptedLLM()
    llm.script = _script
    with on_own_loop(llm, "fake-llm"):
        yield llm


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerThread], endless_llm: ScriptedLLM) -> ServerThread:
    return start_server(
        agent={"engine": "openai", "openai_base_url": endless_llm.base_url, "openai_model": "endless",
               "openai_timeout_s": 5.0},
        limits={"reply_chars": REPLY_CHARS, "llm_max_tokens": 64, "turn_deadline_s": DEADLINE_S},
    )


async def test_an_endless_llm_gets_its_tts_stop_by_the_deadline_and_another_device_is_answered(
    server, endless_llm
):
    async with TestDevice(server.ws_url, mcp=False) as endless, TestDevice(server.ws_url, mcp=False) as other:
        await endless.connect()
        await other.connect()
        asked = time.monotonic()
        await endless.detect("keep talking")
        await endless.wait_json(lambda m: m.get("type") == "tts" and m.get("state") == "start", 10)
        await other.detect("hello")  # while the endless reply is being produced and spoken
        answered = await other.next_reply(timeout=20)
        assert "hello there" in answered.text.lower()
        assert_complete_reply(other, answered)

        reply = await endless.next_reply(timeout=DEADLINE_S + 15)
        took = reply.stop_t - asked
        # Cut at the deadline; its last sentence (about a second of speech) is still heard to its end.
        assert DEADLINE_S - 0.5 <= took <= DEADLINE_S + 4.0, took
        assert answered.start_t < reply.stop_t, "the other device waited for the endless reply"
        assert 1 <= reply.text.count("Still going") <= DEADLINE_S + 1, reply.text
        assert_complete_reply(endless, reply)
    body = next(b for b in endless_llm.requests if b["messages"][-1]["content"] == "keep talking")
    assert body["max_tokens"] == 64 and body["stream"] is True
    # Not read on after the cut: the LLM sees its stream closed at its next chunk (one a second).
    await _until(lambda: endless_llm.closed_by_client >= 1, 3, "the endless stream closed by the engine")


async def test_an_endless_fast_llm_is_cut_at_reply_chars_and_the_turn_ends_normally(server, endless_llm):
    closed = endless_llm.closed_by_client
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.detect("tell me everything")
        reply = await dev.next_reply(timeout=60)
        assert 80 < len(reply.text) <= REPLY_CHARS and reply.text.endswith("sentence."), reply.text
        await _until(lambda: endless_llm.closed_by_client > closed, 3, "the endless stream closed")
        assert_complete_reply(dev, reply)
        before = len(dev.received)
        await dev.detect("hello")  # the session goes on as usual
        assert "hello there" in (await dev.next_reply(timeout=20)).text.lower()
        assert dev.json_messages(before)
