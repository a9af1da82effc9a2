"""Text channels: `wren chat` and `POST /api/chat` share the core; the session key decides the history, and
over HTTP the API key's own sessions (tests/server/test_api_key.py drives the real server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from wren.agent.http import add_routes

REPO = Path(__file__).resolve().parents[2]
KEY = "test-api-key-0123456789abcdef"


@pytest.fixture(params=[False, True], ids=["own-sessions", "device-sessions"])
def device_sessions(request) -> bool:
    return request.param


@pytest.fixture
async def chat_url(agent, device_sessions):
    app = web.Application()
    add_routes(app, agent, KEY, device_sessions=device_sessions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/api/chat"
    finally:
        await runner.cleanup()


async def post(url: str, payload: object) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, http.post(url, json=payload,
                                                          headers={"Authorization": f"Bearer {KEY}"}) as resp:
        return resp.status, await resp.json()


async def test_http_chat_shares_history_within_a_session_name_only(chat_url, agent, device_sessions):
    status, body = await post(chat_url, {"session": "xiaozhi:dev-9", "message": "my name is Ada"})
    assert status == 200 and body["reply"] == "Nice to meet you, Ada. I'll remember your name."
    assert (await post(chat_url, {"session": "xiaozhi:dev-9", "message": "what is my name"}))[1]["reply"] == (
        "Your name is Ada."
    )
    # The device's own session (its voice and text turns) sees it only with [api] device_sessions = true.
    device = (await agent.process_direct("what is my name", session_key="xiaozhi:dev-9")).content
    if device_sessions:
        assert device == "Your name is Ada."
    else:
        assert "don't know your name" in device
    other = (await post(chat_url, {"session": "someone-else", "message": "what is my name"}))[1]
    assert "don't know your name" in other["reply"]
    default = (await post(chat_url, {"message": "what is my name"}))[1]
    assert default["session"] == "default" and "don't know your name" in default["reply"]


@pytest.mark.parametrize("payload", [
    [],
    {"session": "x"},
    {"message": ""},
    {"message": 42},
    {"message": "hi", "session": 7},
    {"message": "x" * 5000},
])
async def test_http_chat_rejects_bad_input_clearly(chat_url, payload):
    status, body = await post(chat_url, payload)
    assert status == 400 and body["error"]


async def test_http_chat_rejects_a_non_json_body(chat_url):
    async with aiohttp.ClientSession() as http, http.post(chat_url, data=b"{nope",
                                                          headers={"X-API-Key": KEY}) as resp:
        assert resp.status == 400 and (await resp.json())["error"] == "body must be JSON"


def wren_chat(data_dir: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, WREN_SERVER_DATA_DIR=str(data_dir))
    return subprocess.run([sys.executable, "-m", "wren.cli", "chat", *args], input=stdin, env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_wren_chat_one_shot_and_interactive_share_the_session_history(tmp_path):
    first = wren_chat(tmp_path, "-s", "xiaozhi:dev-1", "-m", "my name is Ada")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "Nice to meet you, Ada. I'll remember your name."
    again = wren_chat(tmp_path, "-s", "xiaozhi:dev-1", "-m", "what is my name")
    assert again.stdout.strip() == "Your name is Ada."
    interactive = wren_chat(tmp_path, stdin="what is my name\nmy name is Bob\nwhat is my name\n")
    assert interactive.returncode == 0, interactive.stderr
    lines = interactive.stdout.strip().splitlines()
    assert "don't know your name" in lines[0]  # default key cli:direct is another session
    assert lines[-1] == "Your name is Bob."


def test_wren_chat_reports_a_bad_config_file(tmp_path):
    result = wren_chat(tmp_path, "--config", str(tmp_path / "missing.toml"), "-m", "hi")
    assert result.returncode == 2 and "config file not found" in result.stderr
