"""Pairing on the web console (wren.transport.console_devices): the devices waiting with a code, approving and
revoking over the same registry as `wren devices`, and who may do it. The page's Approve button is driven in
a real browser by test_browser_console.py."""

from __future__ import annotations

import json
import time
from typing import Any
from unittest import mock

import aiohttp
import pytest
from aiohttp.test_utils import make_mocked_request
from wren.config import Config
from wren.store.sqlite_devices import SqliteDeviceRegistry
from wren.transport.auth import Authenticator
from wren.transport.console import Console
from wren.transport.console_devices import DeviceApprovals, change_refusal

from tests.console.test_console_api import Feed
from tests.support.device import TestDevice

KEY = "console-key-0123"


@pytest.fixture(scope="module")
def pair_server(start_server):
    return start_server(auth={"mode": "pair"})


@pytest.fixture(scope="module")
def keyed_server(start_server):
    return start_server(auth={"mode": "pair"}, console={"key": KEY})


def ids(n: int) -> tuple[str, str]:
    return f"02:00:00:00:0c:{n:02x}", f"console-client-{n}"


async def ota(server: Any, device: str, client: str) -> dict:
    headers = {"Device-Id": device, "Client-Id": client, "Activation-Version": "1"}
    async with aiohttp.ClientSession() as http, http.post(server.http_url + "/xiaozhi/ota/", json={},
                                                          headers=headers) as resp:
        assert resp.status == 200
        return await resp.json()


async def listed(server: Any, **params: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.get(server.http_url + "/api/devices",
                                                         params=params) as resp:
        return resp.status, await resp.json()


async def change(server: Any, action: str, body: Any, headers: dict[str, str | None] | None = None,
                 **params: str) -> tuple[int, dict]:
    """A POST as the page sends it (JSON, Origin of the page) unless `headers` say otherwise (None: not
    sent)."""
    sent = {k: v for k, v in {"Origin": server.http_url, **(headers or {})}.items() if v is not None}
    async with aiohttp.ClientSession() as http, http.post(f"{server.http_url}/api/devices/{action}",
                                                          json=body, headers=sent, params=params) as resp:
        return resp.status, await resp.json()


def waiting(view: dict, device: str) -> list[dict]:
    return [r for r in view["waiting"] if r["device_id"] == device]


async def test_a_device_is_listed_as_waiting_with_its_code_after_its_ota_check(pair_server):
    device, client = ids(1)
    code = (await ota(pair_server, device, client))["activation"]["code"]
    status, view = await listed(pair_server)
    assert status == 200
    (row,) = waiting(view, device)
    assert (row["code"], row["client_id"], row["remote"]) == (code, client, "127.0.0.1")
    assert time.time() - 30 < row["requested_at"] <= time.time() and row["expires_at"] > time.time() + 500
    assert row["replaces_client_id"] is None
    async with aiohttp.ClientSession() as http, http.get(pair_server.http_url + "/api/status") as resp:
        assert waiting((await resp.json())["pairing"], device) == [row]  # what the page starts from


async def test_approving_the_code_pairs_the_device_and_its_next_ota_answer_has_a_token(pair_server):
    device, client = ids(2)
    code = (await ota(pair_server, device, client))["activation"]["code"]
    status, answer = await change(pair_server, "approve", {"code": code})
    paired = answer["paired"]
    assert status == 200 and (paired["device_id"], paired["client_id"]) == (device, client)
    assert not waiting(answer["pairing"], device)
    assert await change(pair_server, "approve", {"code": code}) == (404, mock.ANY)  # used up
    renewed = await ota(pair_server, device, client)
    assert "activation" not in renewed and renewed["websocket"]["token"]
    async with TestDevice(pair_server.ws_url, device, client, token=renewed["websocket"]["token"],
                          mcp=False) as dev:
        await dev.connect()
        (paired,) = [d for d in (await listed(pair_server))[1]["paired"] if d["device_id"] == device]
        assert paired["client_id"] == client and paired["connected"] is True


async def test_the_live_feed_sends_pairing_changes(pair_server):
    device, client = ids(3)
    async with aiohttp.ClientSession() as http, http.get(pair_server.http_url + "/api/events") as resp:
        feed = Feed(resp)
        first = await feed.wait_for("status")
        assert not waiting(first["pairing"], device)
        code = (await ota(pair_server, device, client))["activation"]["code"]
        await feed.wait_for("pairing", lambda view: [r["code"] for r in waiting(view, device)] == [code])
        assert (await change(pair_server, "approve", {"code": code}))[0] == 200
        await feed.wait_for("pairing", lambda view: any(d["device_id"] == device for d in view["paired"]))


async def test_revoking_ends_the_pairing_and_closes_the_live_connection(pair_server):
    device, client = ids(4)
    code = (await ota(pair_server, device, client))["activation"]["code"]
    assert (await change(pair_server, "approve", {"code": code}))[0] == 200
    token = (await ota(pair_server, device, client))["websocket"]["token"]
    async with TestDevice(pair_server.ws_url, device, client, token=token, mcp=False) as dev:
        await dev.connect()
        status, answer = await change(pair_server, "revoke", {"device_id": device})
        assert status == 200 and answer["closed"] == 1
        assert not any(d["device_id"] == device for d in answer["pairing"]["paired"])
        assert await dev.wait_closed(10) == (4401, "unauthorized: device revoked")
    async with TestDevice(pair_server.ws_url, device, client, token=token, mcp=False) as again:
        await again.open()
        code_, reason = await again.wait_closed(10)
        assert code_ == 4401 and "not paired" in reason
    assert "activation" in await ota(pair_server, device, client)  # it must pair again
    status, answer = await change(pair_server, "revoke", {"device_id": "02:00:00:00:0c:ff"})
    assert status == 404 and "not paired" in answer["error"]


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"},
    {"Origin": "null"},
    {"Origin": "http://127.0.0.1:1"},  # the same address, another port: another origin
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},
])
async def test_a_cross_origin_post_is_refused_and_changes_nothing(pair_server, headers):
    device, client = ids(5)
    code = (await ota(pair_server, device, client))["activation"]["code"]
    status, answer = await change(pair_server, "approve", {"code": code}, headers)
    assert status == 403 and "cross-" in answer["error"]
    assert [r["code"] for r in waiting((await listed(pair_server))[1], device)] == [code]


async def test_only_a_json_post_may_approve(pair_server):
    device, client = ids(6)
    code = (await ota(pair_server, device, client))["activation"]["code"]
    url = pair_server.http_url + "/api/devices/approve"
    async with aiohttp.ClientSession() as http:
        # What a cross-site HTML form can send: urlencoded, or text/plain shaped like JSON.
        async with http.post(url, data={"code": code}) as resp:
            assert resp.status == 415 and "JSON" in (await resp.json())["error"]
        async with http.post(url, data=json.dumps({"code": code}),
                             headers={"Content-Type": "text/plain"}) as resp:
            assert resp.status == 415
        async with http.get(url, params={"code": code}) as resp:
            assert resp.status == 405
    assert [r["code"] for r in waiting((await listed(pair_server))[1], device)] == [code]
    # Without an Origin (curl, a script on the box) a JSON post is fine.
    assert (await change(pair_server, "approve", {"code": code}, {"Origin": None}))[0] == 200


@pytest.mark.parametrize("action, body", [
    ("approve", []), ("approve", {"code": 123456}), ("approve", {"code": "12345"}), ("approve", {}),
    ("approve", {"code": "12345a"}), ("revoke", {"device_id": ""}), ("revoke", {"device_id": "x" * 65}),
])
async def test_bad_bodies_get_a_clear_400(pair_server, action, body):
    status, answer = await change(pair_server, action, body)
    assert status == 400 and answer["error"]


async def test_an_unknown_code_is_a_404_naming_it(pair_server):
    status, answer = await change(pair_server, "approve", {"code": "000001"})
    assert status == 404 and "000001" in answer["error"]


async def test_with_a_console_key_missing_or_wrong_keys_are_refused(keyed_server):
    device, client = ids(7)
    code = (await ota(keyed_server, device, client))["activation"]["code"]
    assert (await listed(keyed_server))[0] == 401
    assert (await listed(keyed_server, key="wrong"))[0] == 401
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        status, answer = await change(keyed_server, "approve", {"code": code}, headers)
        assert status == 401 and "key" in answer["error"]
    assert (await change(keyed_server, "revoke", {"device_id": device}))[0] == 401
    status, view = await listed(keyed_server, key=KEY)
    assert status == 200 and [r["code"] for r in waiting(view, device)] == [code]
    status, answer = await change(keyed_server, "approve", {"code": code}, {"Authorization": f"Bearer {KEY}"})
    assert status == 200 and answer["paired"]["device_id"] == device


async def test_outside_pair_mode_the_routes_say_pairing_is_off(server):
    status, answer = await listed(server)
    assert status == 409 and "mode is 'open'" in answer["error"]
    assert (await change(server, "approve", {"code": "123456"}))[0] == 409
    assert (await change(server, "revoke", {"device_id": "02:00:00:00:0c:01"}))[0] == 409
    async with aiohttp.ClientSession() as http, http.get(server.http_url + "/api/status") as resp:
        assert (await resp.json())["pairing"] is None


# ---- addresses a loopback test server cannot be reached from: the handlers with a mocked peer ----------

def _request(method: str, path: str, remote: str, headers: dict[str, str] | None = None) -> Any:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (remote, 4321) if name == "peername" \
        else default
    return make_mocked_request(method, path, headers=headers or {}, transport=transport)


@pytest.fixture
def approvals(tmp_path) -> Any:
    config = Config()
    registry = SqliteDeviceRegistry(tmp_path)
    try:
        yield DeviceApprovals(Console(config, set(), Authenticator(config.auth, registry, "s" * 32)))
    finally:
        registry.close()


async def test_requests_from_outside_the_local_network_are_refused(approvals):
    for handler, method in ((approvals.list_handler, "GET"), (approvals.approve_handler, "POST"),
                            (approvals.revoke_handler, "POST")):
        resp = await handler(_request(method, "/api/devices", "203.0.113.9",
                                      {"Content-Type": "application/json"}))
        assert resp.status == 403 and "local network" in json.loads(resp.text)["error"], handler


async def test_without_a_key_only_the_servers_own_machine_may_approve(approvals):
    lan = "192.168.1.20"
    assert (await approvals.list_handler(_request("GET", "/api/devices", lan))).status == 200  # may look
    for handler in (approvals.approve_handler, approvals.revoke_handler):
        resp = await handler(_request("POST", "/api/devices/x", lan, {"Content-Type": "application/json"}))
        assert resp.status == 403 and "[console] key" in json.loads(resp.text)["error"]
    json_post = {"Content-Type": "application/json", "Origin": "http://wren.lan:8000"}
    assert change_refusal(lan, json_post, "wren.lan:8000", keyed=False) is not None
    assert change_refusal(lan, json_post, "wren.lan:8000", keyed=True) is None  # the key was checked before
    for remote, host in (("127.0.0.1", "localhost:8000"), ("::ffff:127.0.0.1", "127.0.0.1:8000"),
                         ("::1", "[::1]:8000")):
        same = {"Content-Type": "application/json", "Origin": f"http://{host}"}
        assert change_refusal(remote, same, host, keyed=False) is None, (remote, host)


def test_a_page_rebound_to_loopback_may_not_approve_without_the_key():
    # DNS rebinding: evil.example now resolves to 127.0.0.1, so its page is same-origin with itself and
    # its requests come from loopback; its Host is still its own name.
    rebound = {"Content-Type": "application/json", "Origin": "http://evil.example:8000"}
    refusal = change_refusal("127.0.0.1", rebound, "evil.example:8000", keyed=False)
    assert refusal is not None and refusal.status == 403
    # With a key set, the console's access rule asked for it first, and a rebound page does not have it.
    assert change_refusal("127.0.0.1", rebound, "evil.example:8000", keyed=True) is None
