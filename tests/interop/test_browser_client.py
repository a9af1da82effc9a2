"""The minimal browser-style client.

Imitates a web page talking to the server, like the HTML test pages that come with xiaozhi servers
(`BrowserClient`). A browser's WebSocket API cannot set request headers, so the identity goes in
the query string: `/xiaozhi/v1/?device-id=…&client-id=…&authorization=Bearer%20x` (reference §1.2,
"If there is no `device-id` header, the server looks for query parameters"; docs/server.md
"Connecting"). Its hello is
`{"type":"hello","device_id":…,"device_mac":…,"token":…,"features":{"mcp":true,"emoji":true}}`: no
`version`, no `transport`, no `audio_params`. Those are the official firmware's fields (§3.1); a
server replies with its own hello, whose `transport` and `audio_params` the client reads (§3.2).

It records push-to-talk style: `listen start` with mode manual, 16 kHz Opus in 60 ms frames, then an
empty binary frame as the end-of-recording mark, and no `listen stop`. The firmware ends a manual
recording with `listen stop` (§5.1); this client's only end mark is the empty binary message. It
carries no audio: a well-formed Opus packet has at least its one-byte TOC header (RFC 6716 §3.1), and
even DTX silence packets are 1-2 bytes (§9.1).
"""

from __future__ import annotations

import pytest

from tests.interop.clients import BrowserClient, heard, is_stt
from tests.server.helpers import assert_complete_reply, words


async def test_browser_hello_without_version_transport_or_audio_params_gets_a_server_hello(server):
    async with BrowserClient(server.ws_url) as browser:
        hello = await browser.connect()
        assert hello["transport"] == "websocket"
        assert isinstance(hello.get("session_id"), str) and hello["session_id"]
        params = hello["audio_params"]
        assert params["format"] == "opus" and params["channels"] == 1
        assert params["sample_rate"] in (8000, 12000, 16000, 24000, 48000)
        assert params["frame_duration"] in (20, 40, 60)
        # The session is usable: a typed query is answered.
        await browser.detect("thank you")
        reply = await browser.next_reply(timeout=30)
        assert "welcome" in reply.text.lower(), reply.text
        assert browser.close_code is None


@pytest.mark.spoken
async def test_browser_recording_ends_at_the_empty_binary_frame_and_is_answered(server):
    async with BrowserClient(server.ws_url) as browser:
        await browser.connect()
        await browser.record("what time is it")  # listen start manual, the audio, b"" (no listen stop)
        ended = len(browser.received)
        stt = await browser.wait_for(is_stt, 10)
        assert stt.msg is not None and {"what", "time"} <= heard(stt.msg["text"]), stt.msg
        assert browser.received.index(stt) >= ended, "answered before the recording ended"
        reply = await browser.next_reply(timeout=30)
        assert reply.stt == stt.msg["text"]
        assert_complete_reply(browser, reply)
        assert "it's" in words(reply.text), reply.text
        assert sum(1 for m in browser.json_messages() if m.get("type") == "stt") == 1, browser.summary()
