"""Garbage from one socket gets its documented handling; the server and other sessions carry on."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import aiohttp
import pytest
import websockets
from wren.agent.engines.base import render_empty_prompt
from wren.app import WrenServer
from wren.config import Config, ConfigError

from shared_protocol import messages
from shared_protocol.constants import (
    CLOSE_BAD_AUDIO_PARAMS,
    CLOSE_BAD_HELLO,
    CLOSE_MISSING_DEVICE_ID,
    CLOSE_NO_HELLO,
)
from tests.server.helpers import assert_complete_reply, speak, words
from tests.support.device import TestDevice


async def _garbage_session(server) -> dict[str, object]:
    """Every kind of bad input, one after another, on one socket; returns what was observed."""
    seen: dict[str, object] = {}
    # Seeded: random "Opus packets" can decode to audio the VAD takes for speech and the recogniser hears a
    # word in (once, in a fresh clone's run, the empty-input prompt came back as "Goodbye!": "bye" heard;
    # 500 unseeded tries in process gave no speech at all). Garbage is garbage either way; the same garbage
    # every run makes the prompt a fact rather than a draw.
    garbage = random.Random(20261207).randbytes
    async with TestDevice(server.ws_url, mcp=False) as bad:
        await bad.open()
        # Frames before hello: dropped (counted), the socket stays open.
        await bad.send_binary(garbage(300))
        await bad.send_text('{"type":"listen","state":"start","mode":"auto"}')
        hello = await bad.connect_after_open()
        seen["hello"] = hello
        # Invalid JSON, JSON that is not an object, a message without type, an unknown type,
        # a listen with a bad mode: each ignored.
        for text in ("{not json", "[1,2,3]", '{"state":"start"}', '{"type":"teleport"}',
                     '{"type":"listen","state":"start","mode":"loud"}', "\x00\x01"):
            await bad.send_text(text)
        # Random binary while not listening, then while listening (undecodable Opus): dropped.
        await bad.send_binary(garbage(200))
        await bad.listen_start("manual")
        for _ in range(20):
            await bad.send_binary(garbage(120))
        await bad.send_binary(b"")
        await bad.listen_stop()  # a press with only garbage audio: the empty-input prompt
        reply = await bad.next_reply(timeout=30)
        seen["empty_prompt"] = reply.text
        # The session still works after all that.
        await bad.detect("what time is it")
        seen["after_garbage"] = (await bad.next_reply(timeout=30)).stt
        # An oversized frame: aiohttp closes the socket with 1009 (message too big).
        await bad.send_binary(bytes(server.config.server.max_frame_bytes + 1))
        seen["oversize_close"] = await bad.wait_closed(10)
    return seen


async def test_garbage_on_one_socket_does_not_disturb_another_devices_turn(server):
    async with TestDevice(server.ws_url, mcp=False) as good:
        await good.connect()
        good_turn = asyncio.create_task(speak(good, "what day is it", "manual"))
        seen = await _garbage_session(server)
        await good_turn
        reply = await good.next_reply(timeout=60)
        assert {"what", "day"} <= words(reply.stt or "")
        assert_complete_reply(good, reply)
    assert seen["hello"]["transport"] == "websocket"
    assert seen["empty_prompt"] == render_empty_prompt("manual", 1)  # garbage is no speech
    assert seen["after_garbage"] == "what time is it"
    assert seen["oversize_close"][0] == 1009
    # The server is still up for new connections.
    async with TestDevice(server.ws_url, mcp=False) as later:
        await later.connect()
        await later.detect("thank you")
        assert "welcome" in (await later.next_reply(timeout=30)).text.lower()


async def test_socket_that_never_says_hello_is_closed_after_hello_timeout(start_server):
    server = start_server(server={"hello_timeout_s": 1.0})
    async with TestDevice(server.ws_url, mcp=False) as silent:
        await silent.open()
        code, reason = await silent.wait_closed(10)
    assert code == CLOSE_NO_HELLO and "hello" in reason


async def test_idle_connection_is_closed_by_the_idle_timer(start_server):
    server = start_server(server={"idle_timeout_s": 1.5})
    async with TestDevice(server.ws_url, mcp=False) as idle:
        await idle.connect()
        code, reason = await idle.wait_closed(10)
    assert code == 1000 and "idle" in reason


async def test_connection_without_device_id_is_closed_with_a_clear_reason(server):
    async with TestDevice(server.ws_url, send_identity=False, mcp=False) as anonymous:
        await anonymous.open()
        code, reason = await anonymous.wait_closed(10)
    assert code == CLOSE_MISSING_DEVICE_ID and "device id" in reason


async def test_plain_http_get_says_the_server_is_running(server):
    async with aiohttp.ClientSession() as http:
        for path in ("/", server.config.server.websocket_path):
            async with http.get(server.http_url + path) as resp:
                assert resp.status == 200
                assert await resp.text() == "Wren server is running"


async def test_text_chat_api_shares_the_port(server):
    key = (Path(server.config.server.data_dir) / "api_key").read_text().strip()
    async with aiohttp.ClientSession() as http, http.post(
        server.http_url + "/api/chat", json={"session": "test", "message": "thank you"},
        headers={"Authorization": f"Bearer {key}"},
    ) as resp:
        assert resp.status == 200
        assert "welcome" in (await resp.json())["reply"].lower()


async def test_invalid_hello_is_refused_at_once_with_the_reason(server):
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.open()
        await dev.send_text('{"type":"hello","version":1,"transport":"pigeon"}')  # a transport nobody knows
        code, reason = await dev.wait_closed(5)
    assert code == CLOSE_BAD_HELLO and reason.startswith("invalid hello: transport:")


async def test_hello_with_undecodable_uplink_is_refused_with_the_reason(server):
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.open()
        await dev.send_json(messages.hello_device(
            audio_params=messages.audio_params("opus", 16000, 1, 5), features={}))  # no 5 ms Opus
        code, reason = await dev.wait_closed(5)
    assert code == CLOSE_BAD_AUDIO_PARAMS and reason.startswith("unsupported audio_params")


@pytest.mark.parametrize(
    ("section", "values", "message"),
    [
        ("audio", {"downlink_sample_rate": 44100}, "[audio] downlink"),
        ("audio", {"downlink_format": "mp3"}, "[audio] downlink"),
        ("server", {"protocol_version": 4}, "protocol_version"),
        ("auth", {"mode": "token"}, "auth.secret"),
    ],
)
def test_server_refuses_to_start_with_an_unusable_config(section, values, message):
    config = Config()
    for key, value in values.items():
        setattr(getattr(config, section), key, value)
    with pytest.raises(ConfigError) as excinfo:
        WrenServer(config, speech=object(), agent=object())
    assert message in str(excinfo.value)


async def test_a_client_offering_permessage_deflate_gets_plain_frames(server):
    async with websockets.connect(server.ws_url, compression="deflate", ping_interval=None,
                                  additional_headers={"Device-Id": "aa:bb:cc:00:00:01"}) as ws:
        assert ws.response.headers.get("Sec-WebSocket-Extensions") is None
