"""`[agent] hold_phrase_after_ms` (issue 11, admission): when the engine is slow to begin, or its words wait
for synthesis, the device hears "One moment." (cached audio) instead of silence, then the answer; a fast
reply never says it, and the conversation's history keeps only the answer."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from tests.agent.llm_server import ScriptedLLM, text_chunks
from tests.server.conftest import ServerThread, make_config
from tests.server.helpers import assert_complete_reply
from tests.support.device import TestDevice
from tests.support.own_loop import on_own_loop

HOLD_MS = 600


async def _late(seconds: float, *parts: str) -> AsyncIterator[dict[str, Any]]:
    await asyncio.sleep(seconds)
    for chunk in text_chunks(*parts):
        yield chunk


def _script(body: dict[str, Any]) -> Any:
    if body["messages"][-1]["content"] == "think hard":
        return _late(HOLD_MS / 1000 + 1.0, "Forty", "-two.")
    if body["messages"][-1]["content"] == "answer slowly":
        return text_chunks("Slow words", " here.")  # at once: it is their synthesis that is late
    return text_chunks("Hello", " there.")


@pytest.fixture(scope="module")
def slow_llm() -> Iterator[ScriptedLLM]:
    llm = ScriptedLLM()
    llm.script = _script
    with on_own_loop(llm, "slow-llm"):
        yield llm


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerThread], slow_llm: ScriptedLLM) -> ServerThread:
    return start_server(agent={"engine": "openai", "openai_base_url": slow_llm.base_url,
                               "openai_model": "slow", "hold_phrase_after_ms": HOLD_MS})


async def test_a_slow_engine_is_covered_by_one_moment_then_the_answer(server: ServerThread) -> None:
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        asked = time.monotonic()
        await dev.detect("think hard")
        reply = await dev.next_reply(timeout=20)
        assert reply.sentences == ["One moment.", "Forty-two."]
        # The hold phrase starts at the bound, long before the answer exists.
        said = [r.t for r in dev.received
                if r.kind == "json" and r.msg and r.msg.get("text") == "One moment."]
        assert HOLD_MS / 1000 - 0.05 <= said[0] - asked < HOLD_MS / 1000 + 0.5
        assert_complete_reply(dev, reply)
    history, _ = server.call(server.server.agent.store.load(f"xiaozhi:{dev.device_id}", "openai"))
    assert [row.content for row in history] == ["think hard", "Forty-two."]


async def test_a_fast_engine_never_says_it(server: ServerThread) -> None:
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.detect("hello")
        reply = await dev.next_reply(timeout=20)
        assert reply.sentences == ["Hello there."]


async def test_a_reply_cut_off_during_the_hold_phrase_leaves_it_out_of_the_history(
    server: ServerThread,
) -> None:
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.detect("think hard")
        await dev.wait_json(lambda m: m.get("text") == "One moment.", 10)
        await dev.abort()
        reply = await dev.next_reply(timeout=10)
        assert reply.sentences == ["One moment."]
        assert_complete_reply(dev, reply)
    history, _ = server.call(server.server.agent.store.load(f"xiaozhi:{dev.device_id}", "openai"))
    assert history and history[0].content == "think hard"
    assert not any("One moment" in row.content for row in history)


class SlowVoice:
    """The real piper voice, with the synthesis of one answer held up (as when every speak worker is busy
    with other devices' replies on a full box)."""

    def __init__(self, voice: Any, slow_text: str, delay_s: float) -> None:
        self.voice, self.slow_text, self.delay_s = voice, slow_text, delay_s
        self.name, self.sample_rate = voice.name, voice.sample_rate

    def synthesize(self, text: str) -> Iterator[bytes]:
        if self.slow_text in text:
            time.sleep(self.delay_s)
        yield from self.voice.synthesize(text)


async def test_an_answer_waiting_for_synthesis_is_covered_by_one_moment_from_the_cache(
    speech: Any, slow_llm: ScriptedLLM, tmp_path: Any,
) -> None:
    from wren.pipeline.hold import HOLD_PHRASE
    from wren.speech.tts.phrase_cache import PhraseCache

    tts = PhraseCache(SlowVoice(speech.tts.engine, "Slow words", 2.0))
    tts.warm([HOLD_PHRASE])  # as the server's warm-up does at start
    config = make_config(tmp_path, agent={"engine": "openai", "openai_base_url": slow_llm.base_url,
                                          "openai_model": "slow", "hold_phrase_after_ms": HOLD_MS})
    server = ServerThread(config, dataclasses.replace(speech, tts=tts)).start()
    try:
        async with TestDevice(server.ws_url, mcp=False) as dev:
            await dev.connect()
            asked = time.monotonic()
            await dev.detect("answer slowly")
            reply = await dev.next_reply(timeout=30)
            assert reply.sentences == [HOLD_PHRASE, "Slow words here."]
            said = {r.msg.get("text"): r.t for r in dev.received
                    if r.kind == "json" and r.msg and r.msg.get("state") == "sentence_start"}
            assert HOLD_MS / 1000 - 0.05 <= said[HOLD_PHRASE] - asked < HOLD_MS / 1000 + 0.5
            assert said["Slow words here."] - asked >= 2.0  # the answer itself still waited
            assert_complete_reply(dev, reply)
        history, _ = server.call(server.server.agent.store.load(f"xiaozhi:{dev.device_id}", "openai"))
        assert [row.content for row in history] == ["answer slowly", "Slow words here."]
    finally:
        server.stop()
