"""`POST /api/chat` needs the server's API key (docs/server.md "Security"), and a key has sessions of its
own: it cannot read or change a device's history unless `[api] device_sessions` says so."""

from __future__ import annotations

import json
import re
import stat
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from wren.agent.http import API_KEY_FILE, load_or_create_api_key

from tests.server.conftest import ServerThread, make_config
from tests.support.device import TestDevice
from tests.support.wren_process import wren_serve


def api_key(server: ServerThread) -> str:
    return (Path(server.config.server.data_dir) / API_KEY_FILE).read_text().strip()


async def chat(server: ServerThread, payload: dict,
               headers: dict[str, str] | None = None) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.post(server.http_url + "/api/chat", json=payload,
                                                          headers=headers or {}) as resp:
        return resp.status, await resp.json()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def tell_device_its_name(server: ServerThread, name: str) -> TestDevice:
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.detect(f"my name is {name}")
        assert name in (await dev.next_reply(timeout=30)).text
    return dev


async def test_a_request_without_the_key_is_refused_with_401(server):
    async with aiohttp.ClientSession() as http, http.post(server.http_url + "/api/chat",
                                                          json={"message": "thank you"}) as resp:
        assert resp.status == 401 and resp.content_type == "application/json"
        assert "Bearer" in resp.headers["WWW-Authenticate"]
        assert "missing API key" in (await resp.json())["error"]
    # Refused before the body is read: garbage gets the same 401, not a 400 that would say it was parsed.
    async with aiohttp.ClientSession() as http, http.post(server.http_url + "/api/chat",
                                                          data=b"{nope") as resp:
        assert resp.status == 401


@pytest.mark.parametrize("headers", [
    {"Authorization": "Bearer not-the-key"},
    {"X-API-Key": "not-the-key"},
    {"Authorization": "Basic not-the-key"},
    {"Authorization": "Bearer " + "x" * 5000},
])
async def test_a_wrong_key_is_refused_with_401(server, headers):
    status, body = await chat(server, {"message": "thank you"}, headers)
    assert status == 401 and body["error"]


async def test_the_right_key_is_answered_as_bearer_or_x_api_key(server):
    key = api_key(server)
    status, body = await chat(server, {"message": "thank you"}, bearer(key))
    assert status == 200 and "welcome" in body["reply"].lower() and body["session"] == "default"
    status, body = await chat(server, {"session": "kitchen", "message": "thank you"}, {"X-API-Key": key})
    assert status == 200 and "welcome" in body["reply"].lower() and body["session"] == "kitchen"
    status, body = await chat(server, {"session": 7, "message": "hi"}, bearer(key))
    assert status == 400 and body["error"]  # with the key, bad input is still a clear 400


async def test_a_key_keeps_its_sessions_and_cannot_reach_a_devices_history(server):
    key = api_key(server)
    dev = await tell_device_its_name(server, "Ada")
    device_session = f"xiaozhi:{dev.device_id}"
    status, body = await chat(server, {"session": device_session, "message": "what is my name"}, bearer(key))
    assert status == 200 and "don't know your name" in body["reply"]
    status, _ = await chat(server, {"session": device_session, "message": "my name is Mallory"}, bearer(key))
    assert status == 200
    # What the key said stayed in its own session; the device's history is untouched.
    again = await chat(server, {"session": device_session, "message": "what is my name"}, bearer(key))
    assert again[1]["reply"] == "Your name is Mallory."
    async with TestDevice(server.ws_url, dev.device_id, dev.client_id, mcp=False) as same:
        await same.connect()
        await same.detect("what is my name")
        assert (await same.next_reply(timeout=30)).text == "Your name is Ada."


async def test_device_sessions_true_lets_the_key_continue_a_devices_conversation(start_server):
    shared = start_server(api={"device_sessions": True})
    dev = await tell_device_its_name(shared, "Grace")
    status, body = await chat(shared, {"session": f"xiaozhi:{dev.device_id}", "message": "what is my name"},
                              bearer(api_key(shared)))
    assert status == 200 and body["reply"] == "Your name is Grace."
    other = await chat(shared, {"session": "notes", "message": "what is my name"}, bearer(api_key(shared)))
    assert "don't know your name" in other[1]["reply"]  # any other name is still the key's own session


async def test_the_key_file_is_private_and_the_same_after_a_restart(speech, tmp_path):
    config = make_config(tmp_path)
    first = ServerThread(config, speech).start()
    try:
        assert first.server is not None and first.server.api_key_created
        key = api_key(first)
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", key)
        assert stat.S_IMODE((tmp_path / API_KEY_FILE).stat().st_mode) == 0o600
        assert (await chat(first, {"session": "memo", "message": "my name is Ada"}, bearer(key)))[0] == 200
    finally:
        first.stop()
    second = ServerThread(make_config(tmp_path), speech).start()
    try:
        assert second.server is not None and not second.server.api_key_created
        assert api_key(second) == key
        status, body = await chat(second, {"session": "memo", "message": "what is my name"}, bearer(key))
        assert status == 200 and body["reply"] == "Your name is Ada."  # the same key, the same sessions
    finally:
        second.stop()
    assert sorted(p.name for p in tmp_path.iterdir() if "api_key" in p.name) == [API_KEY_FILE]  # no temp left


def test_an_empty_key_file_is_replaced_and_a_kept_one_is_read(tmp_path):
    (tmp_path / API_KEY_FILE).write_text("\n")
    key, created = load_or_create_api_key(tmp_path)
    assert created and len(key) == 43
    assert load_or_create_api_key(tmp_path) == (key, False)


def printed_after_start(served, text: str) -> str:
    """The server's output once `text` is in it (the key line comes right after the URLs)."""
    deadline = time.monotonic() + 30
    while text not in served.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    return served.log_text()


def test_wren_serve_prints_the_key_once_and_where_it_is_kept(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with wren_serve(data) as first:
        key = (data / API_KEY_FILE).read_text().strip()
        request = urllib.request.Request(f"http://127.0.0.1:{first.port}/api/chat", method="POST",
                                         data=json.dumps({"message": "thank you"}).encode(),
                                         headers={"Content-Type": "application/json", **bearer(key)})
        with urllib.request.urlopen(request, timeout=30) as resp:
            assert "welcome" in json.loads(resp.read())["reply"].lower()
        without = urllib.request.Request(request.full_url, method="POST", data=request.data,
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(without, timeout=30)
        assert refused.value.code == 401
        printed = printed_after_start(first, str(data / API_KEY_FILE))
    assert f"\n  {key}\n" in printed and "shown once" in printed and str(data / API_KEY_FILE) in printed
    with wren_serve(data) as second:
        again = printed_after_start(second, str(data / API_KEY_FILE))
    assert key not in again and str(data / API_KEY_FILE) in again
    assert (data / API_KEY_FILE).read_text().strip() == key
