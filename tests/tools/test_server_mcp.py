from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from wren.agent.loop import AgentLoop
from wren.config import Config
from wren.tools.device_mcp import DeviceMcpClient
from wren.tools.router import ToolRouter
from wren.tools.server_mcp import ServerConfigError, ServerMcpTools, load_server_specs
from wren.tools.spec import ToolError

from tests.tools.device_responder import ScriptedDevice


@pytest.fixture
async def servers(mcp_servers_file: Path):
    tools = ServerMcpTools.from_file(mcp_servers_file)
    await asyncio.wait_for(tools.start(), 60)
    yield tools
    await asyncio.wait_for(tools.close(), 30)


@pytest.fixture
async def device():
    dev = ScriptedDevice()
    client = DeviceMcpClient(dev.receive_from_server, timeout=5.0)
    dev.client = client
    await client.start()
    yield dev, client
    client.close()
    await dev.close()


async def test_stdio_and_http_servers_are_listed_with_the_first_listed_winning_a_clash(servers):
    names = [t.name for t in servers.tools]
    assert {"add", "hang", "fail", "crash", "self.audio_speaker.set_volume", "weather_forecast"} <= set(names)
    assert names.count("add") == 1
    assert next(t for t in servers.tools if t.name == "add").source == "server:local"
    assert await servers.call("add", {"a": 1, "b": 2}, 10) == "3"
    assert await servers.call("weather_forecast", {"city": "paris"}, 10) == "Sunny and 21 degrees in Paris."


async def test_router_prefers_the_server_tool_and_falls_back_to_the_device(servers, device):
    dev, client = device
    router = ToolRouter(server=servers, device=client, timeout=10)
    clash = await router.call("self.audio_speaker.set_volume", {"volume": 30})
    assert clash.ok and clash.text == "house speakers at 30"
    assert dev.state["volume"] == 70  # the device tool was shadowed
    device_only = await router.call("self.screen.set_brightness", {"brightness": 12})
    assert device_only.ok and dev.state["brightness"] == 12
    listed = [t.name for t in router.tools]
    assert listed.count("self.audio_speaker.set_volume") == 1
    assert listed.index("add") < listed.index("self.get_device_status")  # server tools first


async def test_a_hung_server_tool_times_out_into_words(servers):
    router = ToolRouter(server=servers, timeout=0.5)
    result = await asyncio.wait_for(router.call("hang", {}), 10)
    assert not result.ok and result.text == "The hang tool did not answer in time."
    assert (await router.call("add", {"a": 2, "b": 2})).text == "4"  # the connection is still fine


async def test_a_tool_error_comes_back_as_words(servers):
    result = await ToolRouter(server=servers).call("fail", {"reason": "the printer is on fire"})
    assert not result.ok and result.text == "The fail tool failed: the printer is on fire"
    unknown = await ToolRouter(server=servers).call("nope", {})
    assert not unknown.ok and unknown.text == "I don't have a tool called nope."


async def test_a_server_that_dies_is_survived_and_reconnected(servers):
    router = ToolRouter(server=servers, timeout=10)
    died = await router.call("crash", {})
    assert not died.ok and "failed" in died.text
    assert (await router.call("weather_forecast", {"city": "oslo"})).ok  # the other server is unaffected
    # While the stdio server is down its tools are gone: the clashing "add" falls to the HTTP server.
    assert (await router.call("add", {"a": 5, "b": 5})).text == "http says 10"
    for _ in range(200):  # the stdio server is restarted with backoff and takes "add" back
        result = await router.call("add", {"a": 5, "b": 5})
        if result.text == "10":
            break
        await asyncio.sleep(0.1)
    assert result.ok and result.text == "10"


async def test_a_server_that_cannot_start_does_not_stop_the_others(tmp_path, http_mcp_url):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "broken": {"command": str(tmp_path / "no-such-program")},
        "remote": {"url": http_mcp_url},
    }}))
    tools = ServerMcpTools.from_file(path)
    try:
        await asyncio.wait_for(tools.start(), 60)
        assert "weather_forecast" in [t.name for t in tools.tools]
        with pytest.raises(ToolError):
            await tools.call("nothing-here", {}, 1)
    finally:
        await tools.close()


@pytest.mark.parametrize(("content", "problem"), [
    ("not json", "not valid JSON"),
    ('{"servers": {}}', "mcpServers"),
    ('{"mcpServers": {"x": {"command": "a", "url": "http://b"}}}', "exactly one"),
    ('{"mcpServers": {"x": {"url": "http://b", "type": "sse"}}}', "not supported"),
    ('{"mcpServers": {"x": {"command": "a", "args": "oops"}}}', "args must be a list"),
])
def test_bad_server_files_are_clear_errors(tmp_path, content, problem):
    path = tmp_path / "mcp.json"
    path.write_text(content)
    with pytest.raises(ServerConfigError, match=problem):
        load_server_specs(path)


async def test_builtin_engine_uses_a_server_tool_by_intent(mcp_servers_file, tmp_path):
    config = Config()
    config.server.data_dir = str(tmp_path / "data")
    config.mcp.config_file = str(mcp_servers_file)
    agent = AgentLoop.from_config(config)
    await asyncio.wait_for(agent.start(), 60)
    try:
        reply = await agent.process_direct("what is the weather forecast for paris")
        capabilities = await agent.process_direct("what can you do")
    finally:
        await agent.close()
    assert reply.content == "Sunny and 21 degrees in Paris."
    assert "get the weather forecast for a city" in capabilities.content


def test_stdio_server_spec_keeps_command_args_and_env(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"a": {"command": sys.executable, "args": ["-m", "x"],
                                                      "env": {"K": 1}}}}))
    (spec,) = load_server_specs(path)
    assert (spec.command, spec.args, spec.env, spec.url) == (sys.executable, ["-m", "x"], {"K": "1"}, None)
