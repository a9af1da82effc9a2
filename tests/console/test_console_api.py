"""The web console's server side (wren.transport.console): who may see it, and what /api/status and the live
feed say. The page itself is driven in a real browser by test_browser_console.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from unittest import mock

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request
from wren.config import Config
from wren.transport.auth import Authenticator
from wren.transport.console import Console, check_access, is_lan_address
from wren.transport.websocket import STATUS_TEXT

from tests.support.device import TestDevice

BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}


@pytest.mark.parametrize("remote", [
    "127.0.0.1", "127.8.9.10", "10.0.0.7", "172.16.0.1", "172.31.255.254", "192.168.1.20", "::1",
    "fd12:3456::1", "fc00::1", "fe80::1", "fe80::1%eth0", "::ffff:192.168.1.20", "::ffff:127.0.0.1",
])
def test_the_local_network_is_admitted(remote):
    assert is_lan_address(remote)
    assert check_access(remote, "", "", "").ok


@pytest.mark.parametrize("remote", [
    "8.8.8.8", "172.32.0.1", "172.15.255.255", "192.169.0.1", "100.64.0.1", "2001:db8::1", "::ffff:8.8.8.8",
    "", None, "not-an-address",
])
def test_other_addresses_are_refused(remote):
    assert not is_lan_address(remote)
    verdict = check_access(remote, "", "", "")
    assert (verdict.ok, verdict.status) == (False, 403)
    assert "local network" in verdict.reason


def test_a_configured_key_is_needed_from_the_query_or_a_bearer_header():
    assert check_access("127.0.0.1", "", "s3cret", "s3cret").ok
    assert check_access("127.0.0.1", "Bearer s3cret", "", "s3cret").ok
    assert check_access("127.0.0.1", "bearer  s3cret ", "", "s3cret").ok
    for authorization, query in (("", ""), ("Bearer nope", ""), ("", "nope"), ("Basic s3cret", ""),
                                 ("s3cret", "")):
        verdict = check_access("127.0.0.1", authorization, query, "s3cret")
        assert (verdict.ok, verdict.status) == (False, 401), (authorization, query)
    # The key never opens the console to addresses outside the local network.
    assert check_access("8.8.8.8", "", "s3cret", "s3cret").status == 403


def _request_from(remote: str, path: str = "/api/status", headers: dict[str, str] | None = None) -> Any:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (remote, 4321) if name == "peername" \
        else default
    return make_mocked_request("GET", path, headers=headers or {}, transport=transport)


async def test_the_handlers_refuse_a_request_from_outside_the_local_network():
    config = Config()
    config.auth.mode = "open"
    console = Console(config, set(), Authenticator(config.auth))
    for handler in (console.status_handler, console.events_handler, console.talk_handler, console.page):
        resp = await handler(_request_from("203.0.113.9"))
        assert resp.status == 403, handler
    resp = await console.status_handler(_request_from("192.168.1.20"))
    assert resp.status == 200
    assert json.loads(resp.text)["devices"] == []


def _sse_events(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and
                      not line.startswith(":"))
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


class Feed:
    """The live feed, read as a page's EventSource would."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.buffer = ""
        self.events: list[tuple[str, dict]] = []

    async def wait_for(self, kind: str, predicate: Any = lambda data: True, timeout: float = 30) -> dict:
        async def read() -> dict:
            seen = 0
            while True:
                for event, data in self.events[seen:]:
                    if event == kind and predicate(data):
                        return data
                seen = len(self.events)
                chunk = await self.resp.content.readany()
                assert chunk, "the feed ended"
                self.buffer += chunk.decode()
                complete, _, self.buffer = self.buffer.rpartition("\n\n")
                self.events += _sse_events(complete)
        return await asyncio.wait_for(read(), timeout)


async def test_status_lists_devices_and_turns_with_their_latency_split(server):
    async with aiohttp.ClientSession() as http:
        async with http.get(server.http_url + "/api/status") as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"].startswith("application/json")
            before = await resp.json()
        assert before["server"] == "wren" and isinstance(before["version"], str) and before["version"]
        assert before["uptime_s"] >= 0 and before["started_at"] > 1.7e9
        assert before["websocket_path"] == server.config.server.websocket_path
        async with TestDevice(server.ws_url, audio_format="pcm", mcp=False) as dev:
            await dev.connect()
            await dev.detect("thank you")
            reply = await dev.next_reply(timeout=30)
            assert "welcome" in reply.text.lower()
            for _ in range(50):  # the turn record is finished right after `tts stop`
                async with http.get(server.http_url + "/api/status") as resp:
                    status = await resp.json()
                if any(t["device"] == dev.device_id for t in status["turns"]):
                    break
                await asyncio.sleep(0.1)
        (device,) = [d for d in status["devices"] if d["id"] == dev.device_id]
        assert device["client_id"] == dev.client_id and device["session_id"] == dev.session_id
        assert device["state"] in ("idle", "speaking")
        assert device["codec"] == "pcm" and device["protocol_version"] == 1
        assert device["uplink"] == "pcm 16 kHz 60 ms" and device["downlink"] == "pcm 16 kHz 60 ms"
        assert 0 < status["started_at"] <= device["connected_since"]
        (turn,) = [t for t in status["turns"] if t["device"] == dev.device_id]
        assert turn["source"] == "text" and turn["heard"] == "thank you" and not turn["cancelled"]
        assert "welcome" in turn["said"].lower()
        assert set(turn["ms"]) >= {"asr_finalise", "engine_first_sentence", "tts_first_audio", "encode",
                                   "send", "input_end_to_first_audio"}
        assert turn["ms"]["engine_first_sentence"] is not None and turn["ms"]["send"] is not None
        assert device["last_turn"] == turn
        async with http.get(server.http_url + "/api/status") as resp:
            after = await resp.json()
        assert dev.device_id not in [d["id"] for d in after["devices"]]


async def test_the_page_is_served_to_browsers_and_the_plain_line_to_everyone_else(server):
    async with aiohttp.ClientSession() as http:
        async with http.get(server.http_url + "/", headers=BROWSER) as resp:
            assert resp.status == 200 and resp.content_type == "text/html"
            page = await resp.text()
            assert "<title>Wren console</title>" in page and "/console/console.js" in page
            assert "default-src 'self'" in resp.headers["Content-Security-Policy"]
        async with http.get(server.http_url + "/") as resp:
            assert await resp.text() == STATUS_TEXT
        for name, kind in (("console.js", "text/javascript"), ("console.css", "text/css"), ("", "text/html")):
            async with http.get(f"{server.http_url}/console/{name}") as resp:
                assert resp.status == 200 and resp.content_type == kind, name
        async with http.get(server.http_url + "/console/secrets.txt") as resp:
            assert resp.status == 404


async def test_the_live_feed_sends_the_status_then_devices_and_turns(server):
    async with aiohttp.ClientSession() as http, http.get(server.http_url + "/api/events") as resp:
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        feed = Feed(resp)
        first = await feed.wait_for("status")
        assert "devices" in first and "turns" in first
        async with TestDevice(server.ws_url, mcp=False) as dev:
            await dev.connect()
            joined = await feed.wait_for("devices", lambda d: dev.device_id in d["connected"])
            assert [d["codec"] for d in joined["devices"] if d["id"] == dev.device_id] in (["opus"], [None])
            await dev.detect("thank you")
            turn = await feed.wait_for("turn", lambda t: t["device"] == dev.device_id)
            assert turn["heard"] == "thank you" and "welcome" in turn["said"].lower()
            assert turn["ms"]["tts_first_audio"] is not None
        left = await feed.wait_for("devices", lambda d: dev.device_id in d["disconnected"])
        assert dev.device_id not in [d["id"] for d in left["devices"]]


async def test_talk_gives_a_browser_device_its_websocket_path(server):
    async with aiohttp.ClientSession() as http:
        query = {"device-id": "browser-1234", "client-id": "c-1"}
        async with http.get(server.http_url + "/api/talk", params=query) as resp:
            assert resp.status == 200
            assert await resp.json() == {"device_id": "browser-1234", "client_id": "c-1",
                                         "ws_path": server.config.server.websocket_path, "authorization": ""}
        for bad in ({"device-id": "02:00:00:aa:bb:cc", "client-id": "c"}, {"device-id": "browser-1"}):
            async with http.get(server.http_url + "/api/talk", params=bad) as resp:
                assert resp.status == 400, bad


async def test_with_a_key_the_page_and_apis_need_it_and_devices_do_not(start_server):
    keyed = start_server(console={"key": "s3cret"}, auth={"mode": "token",
                                                          "secret": "device-secret-0123456789"})
    url = keyed.http_url
    async with aiohttp.ClientSession() as http:
        for path in ("/api/status", "/api/events", "/api/talk", "/console/"):
            async with http.get(url + path, headers=BROWSER) as resp:
                assert resp.status == 401, path
        async with http.get(url + "/", headers=BROWSER) as resp:
            assert resp.status == 401 and "key" in await resp.text()
        async with http.get(url + "/") as resp:  # the plain line for health checks stays open
            assert resp.status == 200 and await resp.text() == STATUS_TEXT
        async with http.get(url + "/console/console.js") as resp:  # code, not data
            assert resp.status == 200
        async with http.get(url + "/?key=s3cret", headers=BROWSER) as resp:
            assert resp.status == 200 and resp.content_type == "text/html"
        async with http.get(url + "/api/status", headers={"Authorization": "Bearer s3cret"}) as resp:
            assert resp.status == 200
        query = {"key": "s3cret", "device-id": "browser-feed", "client-id": "c-2"}
        async with http.get(url + "/api/talk", params=query) as resp:
            talk = await resp.json()
    # In auth mode token the page gets a token for its browser device; the device path never asks for the key.
    token = talk["authorization"].removeprefix("Bearer ")
    assert token
    async with TestDevice(keyed.ws_url, "browser-feed", "c-2", token=token, use_query=True, mcp=False) as dev:
        hello = await dev.connect()
        assert hello["session_id"]


async def test_a_disabled_console_leaves_the_plain_status_line(start_server):
    plain = start_server(console={"enabled": False})
    async with aiohttp.ClientSession() as http:
        async with http.get(plain.http_url + "/", headers=BROWSER) as resp:
            assert await resp.text() == STATUS_TEXT
        async with http.get(plain.http_url + "/api/status") as resp:
            assert resp.status == 404
