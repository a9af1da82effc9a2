"""Identity, token auth, and the OTA endpoint (reference §1.2, §6)."""

from __future__ import annotations

import subprocess
import sys
import time

import aiohttp
import pytest
from wren.transport.auth import sign_token

from tests.support.device import TestDevice

SECRET = "test-secret-for-wren"
ALLOWED = "aa:bb:cc:dd:ee:ff"


@pytest.fixture(scope="module")
def token_server(start_server):
    return start_server(auth={"mode": "token", "secret": SECRET, "allowed_devices": [ALLOWED],
                              "token_ttl_s": 3600})


async def test_valid_token_is_admitted(token_server):
    dev = TestDevice(token_server.ws_url, "02:00:00:00:00:01", "client-1", mcp=False)
    dev.token = sign_token(SECRET, "client-1", "02:00:00:00:00:01")
    async with dev:
        hello = await dev.connect()
        assert hello["session_id"]


async def test_token_in_query_parameters_is_admitted(token_server):
    token = sign_token(SECRET, "client-q", "02:00:00:00:00:02")
    async with TestDevice(token_server.ws_url, "02:00:00:00:00:02", "client-q", token=token, mcp=False,
                          use_query=True) as dev:
        assert (await dev.connect())["transport"] == "websocket"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (None, "missing Authorization"),
        ("garbage", "malformed token"),
        (sign_token(SECRET, "client-1", "02:00:00:00:00:99"), "bad token signature"),  # another device's
        (sign_token("other-secret", "client-1", "02:00:00:00:00:01"), "bad token signature"),
        (sign_token(SECRET, "client-1", "02:00:00:00:00:01", ts=int(time.time()) - 7200), "expired"),
    ],
    # Named, not shown: a token holds the time it was made, and every suite worker must collect the same ids.
    ids=["none", "garbage", "another-device", "another-secret", "expired"],
)
async def test_rejected_token_closes_with_4401_and_a_clear_reason(token_server, token, reason):
    async with TestDevice(token_server.ws_url, "02:00:00:00:00:01", "client-1", token=token,
                          mcp=False) as dev:
        await dev.open()
        code, text = await dev.wait_closed(10)
    assert code == 4401
    assert text.startswith("unauthorized") and reason in text


async def test_allowlisted_device_needs_no_token(token_server):
    async with TestDevice(token_server.ws_url, ALLOWED.upper(), mcp=False) as dev:
        assert (await dev.connect())["session_id"]


async def test_ota_returns_websocket_token_and_server_time(token_server):
    # Token mode: OTA renews a token the device already holds (unknown devices get none: test_auth_hardening).
    held = sign_token(SECRET, "client-5", "02:00:00:00:00:05", ts=int(time.time()) - 60)
    headers = {"Device-Id": "02:00:00:00:00:05", "Client-Id": "client-5", "Authorization": f"Bearer {held}"}
    body = {"application": {"version": "1.2.3"}, "board": {"type": "wren-host"}}
    async with aiohttp.ClientSession() as http:
        before = time.time() * 1000
        async with http.post(token_server.http_url + "/xiaozhi/ota/", json=body, headers=headers) as resp:
            assert resp.status == 200
            data = await resp.json()
    ws = data["websocket"]
    assert ws["url"] == token_server.ws_url
    assert ws["version"] == 1
    assert before - 1000 <= data["server_time"]["timestamp"] <= time.time() * 1000 + 1000
    assert data["server_time"]["timezone_offset"] == 0
    assert data["firmware"] == {"version": "1.2.3", "url": ""}
    # The handed-out token really admits that device.
    async with TestDevice(token_server.ws_url, "02:00:00:00:00:05", "client-5", token=ws["token"],
                          mcp=False) as dev:
        assert (await dev.connect())["session_id"]


async def test_ota_in_open_mode_gives_an_empty_token_and_the_public_url(start_server):
    server = start_server(server={"public_ws_url": "ws://wren.lan:8000/xiaozhi/v1/",
                                  "timezone_offset_minutes": 480})
    async with aiohttp.ClientSession() as http, http.post(server.http_url + "/xiaozhi/ota/", data=b"",
                         headers={"Device-Id": "d", "Client-Id": "c"}) as resp:
        data = await resp.json()
    assert data["websocket"] == {"url": "ws://wren.lan:8000/xiaozhi/v1/", "token": "", "version": 1}
    assert data["server_time"]["timezone_offset"] == 480


@pytest.mark.parametrize(
    ("headers", "body", "error"),
    [
        ({"Client-Id": "c"}, b"{}", "missing Device-Id"),
        ({"Device-Id": "d"}, b"{}", "missing Client-Id"),
        ({}, b"{}", "missing Device-Id and Client-Id"),
        ({"Device-Id": "d", "Client-Id": "c"}, b"{nope", "system-info JSON"),
    ],
)
async def test_ota_bad_requests_get_a_clear_400(server, headers, body, error):
    async with aiohttp.ClientSession() as http, http.post(
        server.http_url + "/xiaozhi/ota/", data=body, headers=headers
    ) as resp:
        assert resp.status == 400
        assert error in (await resp.json())["error"]


def test_wren_token_command_prints_a_token_the_server_accepts(tmp_path):
    config = tmp_path / "wren.toml"
    config.write_text(f'[auth]\nmode = "token"\nsecret = "{SECRET}"\n')
    out = subprocess.run(
        [sys.executable, "-m", "wren.cli", "token", "02:00:00:00:00:07", "--client-id", "c7",
         "--config", str(config)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()
    signature, _, ts = out.rpartition(".")
    assert out == sign_token(SECRET, "c7", "02:00:00:00:00:07", ts=int(ts))
    assert signature and abs(int(ts) - time.time()) < 60
