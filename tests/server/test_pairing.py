"""Pairing by code (auth mode `pair`, the default): an unknown device gets a code, the owner approves it with
`wren devices approve`, and only then is there a token, bound to that device id and client id, stored
hashed and revocable (reference §6.3 `activation`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from wren.store.records import MAX_PENDING

from tests.support.device import TestDevice

ROOT = Path(__file__).resolve().parents[2]
DEVICE, CLIENT = "02:00:00:00:0a:01", "client-pair-1"


@pytest.fixture(scope="module")
def pair_server(start_server):
    return start_server(auth={"mode": "pair"})


def devices_cli(server, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WREN_")}
    env.update(WREN_SERVER_DATA_DIR=server.config.server.data_dir, WREN_AUTH_MODE="pair")
    return subprocess.run([sys.executable, "-m", "wren.cli", "devices", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=60)


async def ota(server, device: str, client: str) -> dict:
    headers = {"Device-Id": device, "Client-Id": client, "Activation-Version": "1"}
    async with aiohttp.ClientSession() as http, http.post(server.http_url + "/xiaozhi/ota/", json={},
                                                          headers=headers) as resp:
        assert resp.status == 200
        return await resp.json()


async def activate(server, device: str, client: str) -> int:
    headers = {"Device-Id": device, "Client-Id": client}
    async with aiohttp.ClientSession() as http, http.post(server.http_url + "/xiaozhi/ota/activate", json={},
                                                          headers=headers) as resp:
        return resp.status


async def refusal(server, device: str, client: str, token: str | None) -> tuple[int, str]:
    async with TestDevice(server.ws_url, device, client, token=token, mcp=False) as dev:
        await dev.open()
        return await dev.wait_closed(10)


async def pair(server, device: str, client: str) -> str:
    """The whole flow as a device and its owner go through it; the device's token."""
    code = (await ota(server, device, client))["activation"]["code"]
    approved = devices_cli(server, "approve", code)
    assert approved.returncode == 0, approved.stderr
    answer = await ota(server, device, client)
    assert "activation" not in answer
    return answer["websocket"]["token"]


async def test_an_unknown_device_gets_a_code_to_show_and_no_token(pair_server):
    answer = await ota(pair_server, DEVICE, CLIENT)
    activation = answer["activation"]
    assert activation["code"].isdigit() and len(activation["code"]) == 6
    assert activation["message"].endswith("\n" + activation["code"]) and activation["challenge"]
    assert answer["websocket"]["token"] == "" and answer["websocket"]["url"] == pair_server.ws_url
    assert (await ota(pair_server, DEVICE, CLIENT))["activation"]["code"] == activation["code"]  # same code
    assert await activate(pair_server, DEVICE, CLIENT) == 202  # pending: the firmware polls again in 3 s
    listed = devices_cli(pair_server, "list")
    assert activation["code"] in listed.stdout and DEVICE in listed.stdout


async def test_an_approved_device_gets_a_token_that_admits_it_and_only_it(pair_server):
    device, client = "02:00:00:00:0a:02", "client-pair-2"
    code = (await ota(pair_server, device, client))["activation"]["code"]
    assert devices_cli(pair_server, "approve", "000000" if code != "000000" else "999999").returncode == 1
    assert devices_cli(pair_server, "approve", code).returncode == 0
    assert await activate(pair_server, device, client) == 200
    token = (await ota(pair_server, device, client))["websocket"]["token"]
    assert token
    async with TestDevice(pair_server.ws_url, device, client, token=token, mcp=False) as dev:
        await dev.connect()
        await dev.detect("what time is it")
        assert (await dev.next_reply(timeout=30)).text.startswith("It's")
    assert (await ota(pair_server, device, client))["websocket"]["token"] == token  # the same one again


async def test_a_websocket_without_the_token_of_its_paired_id_is_refused_with_a_reason(pair_server):
    token = await pair(pair_server, "02:00:00:00:0a:03", "client-pair-3")
    code, reason = await refusal(pair_server, "02:00:00:00:0a:03", "client-pair-3", None)
    assert code == 4401 and "missing Authorization" in reason
    code, reason = await refusal(pair_server, "02:00:00:00:0a:09", "client-pair-3", token)  # another id
    assert code == 4401 and "bad token signature" in reason
    code, reason = await refusal(pair_server, "02:00:00:00:0a:0a", "client-x", None)  # never paired
    assert code == 4401


async def test_an_impersonator_with_a_paired_mac_but_another_client_id_gets_a_code_not_a_token(pair_server):
    device = "02:00:00:00:0a:04"
    token = await pair(pair_server, device, "client-real")
    answer = await ota(pair_server, device, "client-impostor")
    assert answer["websocket"]["token"] == "" and "activation" in answer
    code, reason = await refusal(pair_server, device, "client-impostor", token)
    assert code == 4401 and "unauthorized" in reason
    async with TestDevice(pair_server.ws_url, device, "client-real", token=token, mcp=False) as dev:
        assert (await dev.connect())["session_id"]  # the real device is not disturbed


async def test_revoking_a_device_ends_its_token_at_once(pair_server):
    device, client = "02:00:00:00:0a:05", "client-pair-5"
    token = await pair(pair_server, device, client)
    revoked = devices_cli(pair_server, "revoke", device)
    assert revoked.returncode == 0, revoked.stderr
    code, reason = await refusal(pair_server, device, client, token)
    assert code == 4401 and "not paired" in reason
    assert "activation" in await ota(pair_server, device, client)  # it must pair again
    assert devices_cli(pair_server, "revoke", "02:00:00:00:0a:77").returncode == 1


async def test_tokens_are_stored_hashed_and_the_registry_is_private(pair_server):
    token = await pair(pair_server, "02:00:00:00:0a:06", "client-pair-6")
    path = Path(pair_server.config.server.data_dir) / "devices.sqlite3"
    stored = b"".join(p.read_bytes() for p in path.parent.glob("devices.sqlite3*"))
    assert token.encode() not in stored and token.split(".")[0].encode() not in stored
    assert path.stat().st_mode & 0o077 == 0
    assert (path.parent / "auth_secret").stat().st_mode & 0o077 == 0


async def test_a_flood_of_unknown_devices_keeps_a_bounded_list_of_requests(pair_server):
    for i in range(MAX_PENDING + 8):
        await ota(pair_server, f"02:00:00:00:0b:{i:02x}", f"flood-{i}")
    listed = devices_cli(pair_server, "list").stdout
    waiting = int(listed.split("waiting for approval (")[1].split(")")[0])
    assert waiting <= MAX_PENDING
    assert "flood-39" in listed and "flood-0 " not in listed  # the oldest went first
