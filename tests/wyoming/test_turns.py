"""Device turns with Wyoming engines: a Wren server whose `[asr]` and `[tts]` are `wyoming`, pointed at a
Wyoming server (Wren's own, around Moonshine and piper) that the test stops and starts again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from wren.config import VadConfig
from wren.speech import SpeechStack
from wren.speech.asr.wyoming import WyomingAsrEngine
from wren.speech.tts.wyoming import WyomingTtsEngine
from wren.speech.vad import load_vad

from tests.server.conftest import ServerThread, make_config
from tests.server.helpers import speak, words
from tests.support.device import TestDevice

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def wyoming_wren(wyoming_thread: Any, tmp_path: Any) -> Iterator[tuple[ServerThread, Any]]:
    """(a Wren server speaking and listening only through Wyoming, the Wyoming server it uses)."""
    backend = wyoming_thread()
    speech = SpeechStack(vad=load_vad(VadConfig()), asr=WyomingAsrEngine(backend.uri, timeout_s=5.0),
                         tts=WyomingTtsEngine(backend.uri, timeout_s=5.0))
    server = ServerThread(make_config(tmp_path), speech).start()
    try:
        yield server, backend
    finally:
        server.stop()


async def test_a_spoken_question_is_heard_and_answered_through_wyoming(wyoming_wren):
    server, _ = wyoming_wren
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await speak(dev, "what time is it", "manual")
        reply = await dev.next_reply(timeout=60)
        assert {"what", "time"} <= words(reply.stt or ""), reply.stt
        assert "it's" in words(reply.text) and reply.frames, dev.summary()


async def test_a_dead_wyoming_server_ends_the_turn_with_tts_stop_and_the_next_turn_after_it_returns_works(
    wyoming_wren,
):
    server, backend = wyoming_wren
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        backend.stop()
        await dev.detect("what time is it")
        failed = await dev.next_reply(timeout=30)  # returns only once `tts stop` has arrived
        assert failed.stop_t >= failed.start_t and not failed.frames

        await speak(dev, "what time is it", "manual")  # the recogniser is gone too: not listened to, the
        unheard = await dev.next_reply(timeout=30)  # short "busy" answer (unspoken: the voice is down too)
        assert unheard.stt is None and not unheard.frames, dev.summary()

        backend.start()  # back on the same port
        links = (server.speech.asr.link, server.speech.tts.link)
        assert all(link.down for link in links)
        await asyncio.sleep(max(link.retry_in_s for link in links) + 0.05)  # the backoff (≥ 0.5 s) is over
        started = time.monotonic()
        await speak(dev, "what time is it", "manual")
        reply = await dev.next_reply(timeout=60)
        assert {"what", "time"} <= words(reply.stt or ""), reply.stt
        assert reply.frames and "it's" in words(reply.text), dev.summary()
        assert time.monotonic() - started < 30
        assert not any(link.down for link in links)
