"""End to end: a device's typed query through the real Wren server, answered by (a fake of) Home Assistant.

The fake (tests/agent/ha_server.py) speaks HA's documented conversation API on a loop of its own, so the
Wren server's thread reaches it as a real endpoint. A slow HA still ends the turn: apology, `tts stop`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from wren.agent.engines.homeassistant import APOLOGY_SLOW

from tests.agent.ha_server import TOKEN, FakeHomeAssistant
from tests.server.conftest import ServerThread
from tests.server.helpers import assert_complete_reply
from tests.support.device import TestDevice
from tests.support.own_loop import on_own_loop


@pytest.fixture(scope="module")
def fake_ha() -> Iterator[FakeHomeAssistant]:
    with on_own_loop(FakeHomeAssistant(), "fake-ha") as ha:
        yield ha


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerThread], fake_ha: FakeHomeAssistant) -> ServerThread:
    return start_server(agent={"engine": "homeassistant", "ha_url": fake_ha.url, "ha_token": TOKEN,
                               "ha_language": "en", "ha_timeout_s": 1.0})


async def test_a_typed_query_is_answered_by_home_assistant_and_the_conversation_continues(server, fake_ha):
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.detect("turn on the kitchen light")
        reply = await dev.next_reply(timeout=30)
        assert reply.text == "Turned on the kitchen light."
        assert_complete_reply(dev, reply)
        await dev.detect("what did i just ask")
        assert (await dev.next_reply(timeout=30)).text == "You asked: turn on the kitchen light."
    first, second = (r["body"] for r in fake_ha.requests[-2:])
    assert first["language"] == "en" and second["conversation_id"] in fake_ha.conversations


async def test_a_slow_home_assistant_gets_the_device_an_apology_and_its_tts_stop(server, fake_ha):
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.detect("slow")
        reply = await dev.next_reply(timeout=30)
        assert reply.text == APOLOGY_SLOW
        assert_complete_reply(dev, reply)
