"""Auth hardening against the real server: token parsing that never fails open or crashes, an
unambiguous signed message, a minimum secret, id checks before logs, one live connection per device id,
and an OTA endpoint that mints tokens only for devices that may have one (docs/server.md "Security")."""

from __future__ import annotations

import base64
import hashlib
import hmac
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from wren.transport.auth import sign_token
from wren.transport.live import REPLACED_REASON

from tests.server.helpers import assert_complete_reply
from tests.support.device import TestDevice

SECRET = "hardening-secret-0123456789abcdef"
ALLOWED = "aa:bb:cc:00:00:01"
DEVICE, CLIENT = "02:00:00:00:10:01", "client-h1"


@pytest.fixture(scope="module")
def token_server(start_server):
    return start_server(auth={"mode": "token", "secret": SECRET, "allowed_devices": [ALLOWED],
                              "token_ttl_s": 3600})


def legacy_token(secret: str, client_id: str, device_id: str) -> str:
    """A token of the former scheme (HMAC over "client|device|ts"): no longer accepted."""
    ts = int(time.time())
    mac = hmac.new(secret.encode(), f"{client_id}|{device_id}|{ts}".encode(), hashlib.sha256).digest()
    return f"{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}.{ts}"


def good() -> str:
    return sign_token(SECRET, CLIENT, DEVICE)


BAD_TOKENS = [
    ("forged", sign_token("another-secret-of-32-bytes-length", CLIENT, DEVICE), "bad token signature"),
    ("other device", sign_token(SECRET, CLIENT, "02:00:00:00:10:99"), "bad token signature"),
    ("expired", sign_token(SECRET, CLIENT, DEVICE, ts=int(time.time()) - 7200), "token expired"),
    ("future", sign_token(SECRET, CLIENT, DEVICE, ts=int(time.time()) + 7200), "in the future"),
    ("legacy scheme", legacy_token(SECRET, CLIENT, DEVICE), "bad token signature"),
    ("no dot", "A" * 43, "malformed token"),
    ("three fields", good() + ".5", "malformed token"),
    ("empty signature", "." + str(int(time.time())), "malformed token"),
    ("short signature", "AAAA." + str(int(time.time())), "malformed token"),
    ("bad base64", "!" * 43 + "." + str(int(time.time())), "malformed token"),
    ("non-integer ts", good().rpartition(".")[0] + ".12a4", "malformed token"),
    ("negative ts", good().rpartition(".")[0] + ".-5", "malformed token"),
    ("huge ts", good().rpartition(".")[0] + "." + "9" * 40, "malformed token"),
    ("unicode digits ts", good().rpartition(".")[0] + ".１２３", "not ASCII"),
    ("superscript ts", good().rpartition(".")[0] + ".²", "not ASCII"),
    ("non-ASCII", "é" * 43 + ".1", "not ASCII"),
    ("oversized", "A" * 4000 + ".1", "longer than 256"),
]


@pytest.mark.parametrize(("token", "reason"), [pytest.param(t, r, id=name) for name, t, r in BAD_TOKENS])
async def test_bad_tokens_are_refused_with_4401_and_a_reason(token_server, token, reason):
    # In the query (the one place any text, even non-ASCII, reaches the server unchanged).
    async with TestDevice(token_server.ws_url, DEVICE, CLIENT, token=token, mcp=False, use_query=True) as dev:
        await dev.open()
        code, text = await dev.wait_closed(10)
    assert code == 4401, (code, text)
    assert text.startswith("unauthorized: ") and reason in text, text


@pytest.mark.parametrize(("authorization", "reason"), [
    ("Bearer", "must be 'Bearer <token>'"),
    ("Basic abc", "must be 'Bearer <token>'"),
    ("Bearer " + "A" * 3000, "longer than 256"),
    ("bearer  x.y", "malformed token"),
])
async def test_bad_authorization_headers_are_refused_with_4401(token_server, authorization, reason):
    headers = {"Device-Id": DEVICE, "Client-Id": CLIENT, "Authorization": authorization}
    async with aiohttp.ClientSession() as http, http.ws_connect(token_server.ws_url, headers=headers) as ws:
        msg = await ws.receive(timeout=10)
    assert ws.close_code == 4401 and reason in str(msg.extra), (ws.close_code, msg)


async def test_pipe_in_ids_cannot_move_a_token_to_other_ids(token_server):
    """The old message "client|device|ts" was the same for ("a", "b|c") and ("a|b", "c")."""
    token = sign_token(SECRET, "a", "b|c")
    async with TestDevice(token_server.ws_url, "c", "a|b", token=token, mcp=False) as dev:
        await dev.open()
        code, text = await dev.wait_closed(10)
    assert (code, text) == (4401, "unauthorized: bad token signature for this device")
    async with TestDevice(token_server.ws_url, "b|c", "a", token=token, mcp=False) as dev:  # its own ids
        assert (await dev.connect())["session_id"]


async def test_after_all_that_the_server_still_serves_a_good_device(token_server):
    async with TestDevice(token_server.ws_url, DEVICE, CLIENT, token=good(), mcp=False) as dev:
        await dev.connect()
        await dev.detect("what time is it")
        reply = await dev.next_reply(timeout=30)
        assert_complete_reply(dev, reply)


@pytest.mark.parametrize(
    ("device_id", "client_id", "reason"),
    [
        ("has space", "c", "invalid device id"),
        ('quo"te', "c", "invalid device id"),
        ("it's", "c", "invalid device id"),
        ("back\\slash", "c", "invalid device id"),
        ("line\nINFO forged log line", "c", "invalid device id"),
        ("esc\x1b[31m", "c", "invalid device id"),
        ("mäc", "c", "invalid device id"),
        ("x" * 65, "c", "longer than 64"),
        ("02:00:00:00:10:02", "bad client", "invalid client id"),
        ("02:00:00:00:10:02", "c" * 65, "client id longer than 64"),
    ],
)
async def test_bad_ids_are_refused_with_4400(token_server, device_id, client_id, reason):
    async with TestDevice(token_server.ws_url, device_id, client_id, mcp=False, use_query=True) as dev:
        await dev.open()
        code, text = await dev.wait_closed(10)
    assert code == 4400 and reason in text, (code, text)


@pytest.mark.parametrize("device_id", ["A0:85:E3:F4:49:34", "123e4567-e89b-12d3-a456-426614174000",
                                       "browser-3f2a9c", "x" * 64])
async def test_ordinary_ids_pass(server, device_id):
    async with TestDevice(server.ws_url, device_id, "9a1b7c4e-0000-4000-8000-000000000001", mcp=False) as dev:
        assert (await dev.connect())["session_id"]


async def test_a_second_connection_for_the_same_device_takes_over(server):
    device_id = "02:00:00:00:10:03"
    async with TestDevice(server.ws_url, device_id, "first", mcp=False) as first:
        await first.connect()
        await first.detect("what can you do")  # a long answer in progress holds the session's turn
        await first.wait_json(lambda m: m.get("type") == "tts" and m.get("state") == "start", 30)
        async with TestDevice(server.ws_url, device_id, "second", mcp=False) as second:
            hello = await second.connect()
            # By the time the new hello is sent, the old session was closed with a reason and is gone.
            code, text = await first.wait_closed(10)
            assert (code, text) == (1000, REPLACED_REASON)
            assert hello["session_id"] != first.session_id
            live = [s for s in server.sessions if s.identity.device_id == device_id]
            assert len(live) == 1 and live[0].session_id == hello["session_id"]
            await second.detect("what time is it")
            reply = await second.next_reply(timeout=30)
            assert reply.stt == "what time is it"
            assert_complete_reply(second, reply)


async def _ota(server, headers: dict[str, str]) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.post(server.http_url + "/xiaozhi/ota/", json={},
                                                          headers=headers) as resp:
        return resp.status, await resp.json()


async def test_ota_in_token_mode_mints_only_for_devices_that_may_have_a_token(token_server):
    unknown = {"Device-Id": "02:00:00:00:10:04", "Client-Id": "c4"}
    status, data = await _ota(token_server, unknown)
    assert status == 200 and data["websocket"]["token"] == ""
    legacy = legacy_token(SECRET, "c4", "02:00:00:00:10:04")
    status, data = await _ota(token_server, {**unknown, "Authorization": f"Bearer {legacy}"})
    assert status == 200 and data["websocket"]["token"] == ""
    # A device holding a valid token gets a fresh one (renewal), which admits it.
    held = sign_token(SECRET, "c4", "02:00:00:00:10:04", ts=int(time.time()) - 60)
    status, data = await _ota(token_server, {**unknown, "Authorization": f"Bearer {held}"})
    renewed = data["websocket"]["token"]
    assert renewed and renewed != held
    async with TestDevice(token_server.ws_url, "02:00:00:00:10:04", "c4", token=renewed, mcp=False) as dev:
        assert (await dev.connect())["session_id"]
    # An allowlisted device gets one without presenting anything.
    status, data = await _ota(token_server, {"Device-Id": ALLOWED, "Client-Id": "c5"})
    assert data["websocket"]["token"]


async def test_ota_refuses_bad_ids_with_400(token_server):
    status, data = await _ota(token_server, {"Device-Id": "x" * 65, "Client-Id": "c"})
    assert status == 400 and "longer than 64" in data["error"]


@pytest.mark.parametrize(("secret", "said"), [("short", "too short (5 bytes"),
                                              ("change-me", "documentation's example")])
def test_a_weak_secret_makes_serve_exit_2_with_one_line(tmp_path: Path, secret: str, said: str):
    config = tmp_path / "wren.toml"
    config.write_text(f'[auth]\nmode = "token"\nsecret = "{secret}"\n')
    done = subprocess.run([sys.executable, "-m", "wren.cli", "serve", "--port", "0", "--config", str(config)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wren serve: auth.secret") and said in lines[0], lines
