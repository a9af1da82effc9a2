from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from wren.agent.events import TextChunk
from wren.agent.loop import AgentLoop
from wren.agent.messages import InboundMessage
from wren.config import Config
from wren.tools.device_mcp import FIRST_CALL_ID, DeviceMcpClient
from wren.tools.router import ToolRouter
from wren.tools.spec import ToolError, ToolTimeout

from shared_protocol import device_mcp
from tests.tools.device_responder import ScriptedDevice


@pytest.fixture
async def device():
    dev = ScriptedDevice()
    client = DeviceMcpClient(dev.receive_from_server, timeout=5.0)
    dev.client = client
    yield dev, client
    client.close()
    await dev.close()


async def test_start_initializes_then_lists_every_page(device):
    dev, client = device
    tools = await asyncio.wait_for(client.start(), 10)
    requests = [r for r in dev.requests if "id" in r]
    assert requests[0]["method"] == "initialize" and requests[0]["id"] == 1
    lists = [r for r in requests if r["method"] == "tools/list"]
    assert len(lists) == 2  # the device's 8000-byte page limit splits the list
    assert lists[0]["params"] == {"cursor": "", "withUserTools": False}
    visible = [t["name"] for t in dev.tools if "annotations" not in t]
    first_page, cursor = device_mcp.paginate(visible_tools(dev), "")
    assert lists[1]["params"]["cursor"] == cursor == visible[len(first_page)]
    assert [t.name for t in tools] == visible
    assert "self.reboot" not in [t.name for t in tools]
    assert client.server_info == {"name": "test-board", "version": "1.9.0"}
    assert all(isinstance(r["id"], int) and r["id"] >= FIRST_CALL_ID for r in requests[1:])


def visible_tools(dev):
    return [t for t in dev.tools if "annotations" not in t]


async def test_call_returns_the_device_text_and_changes_its_state(device):
    dev, client = device
    await client.start()
    assert await client.call("self.audio_speaker.set_volume", {"volume": 30}) == "true"
    assert dev.state["volume"] == 30


async def test_device_errors_without_code_become_tool_errors_with_its_message(device):
    _, client = device
    await client.start()
    with pytest.raises(ToolError, match="Value exceeds maximum allowed: 100"):
        await client.call("self.audio_speaker.set_volume", {"volume": 300})
    with pytest.raises(ToolError, match=r"Unknown tool: self\.nope"):
        await client.call("self.nope", {})
    with pytest.raises(ToolError, match="Missing valid argument: volume"):
        await client.call("self.audio_speaker.set_volume", {"volume": "loud"})


async def test_a_hung_tool_times_out_and_its_late_id_is_forgotten(device):
    dev, client = device
    await client.start()
    dev.hang.add("self.screen.set_brightness")
    with pytest.raises(ToolTimeout):
        await client.call("self.screen.set_brightness", {"brightness": 10}, timeout=0.3)
    assert client.calls_in_flight == 0
    assert await client.call("self.audio_speaker.set_volume", {"volume": 5}) == "true"


async def test_close_fails_pending_calls_and_later_calls(device):
    dev, client = device
    await client.start()
    dev.hang.add("self.screen.set_brightness")
    pending = asyncio.create_task(client.call("self.screen.set_brightness", {"brightness": 10}, timeout=30))
    await asyncio.sleep(0.1)
    client.close()
    with pytest.raises(ToolError, match="disconnected"):
        await asyncio.wait_for(pending, 5)
    with pytest.raises(ToolError):
        await client.call("self.audio_speaker.set_volume", {"volume": 5})


async def test_malformed_and_unknown_payloads_are_ignored_and_device_requests_refused():
    sent: list[dict] = []

    async def send(payload: dict) -> None:
        sent.append(payload)

    client = DeviceMcpClient(send)
    client.handle("not a dict")
    client.handle({"jsonrpc": "1.0", "id": 3, "result": {}})
    client.handle({"jsonrpc": "2.0", "id": 424242, "result": {}})  # nobody waits for it
    client.handle({"jsonrpc": "2.0", "id": 5, "method": "sampling/createMessage", "params": {}})
    await asyncio.sleep(0.05)
    refusal = {"message": "Method not supported: sampling/createMessage"}
    assert sent == [{"jsonrpc": "2.0", "id": 5, "error": refusal}]


async def test_router_turns_device_failures_into_words(device):
    dev, client = device
    await client.start()
    dev.hang.add("self.screen.set_brightness")
    router = ToolRouter(device=client, timeout=0.3)
    hung = await router.call("self.screen.set_brightness", {"brightness": 3})
    assert not hung.ok and hung.text == "The screen set brightness tool did not answer in time."
    bad = await router.call("self.audio_speaker.set_volume", {"volume": 300})
    assert not bad.ok and "Value exceeds maximum allowed: 100" in bad.text


async def test_set_the_volume_to_thirty_reaches_the_device_through_the_core(device, tmp_path: Path):
    dev, client = device
    await client.start()
    config = Config()
    config.server.data_dir = str(tmp_path)
    agent = AgentLoop.from_config(config)
    await agent.start()
    try:
        msg = InboundMessage("xiaozhi", sender_id="dev", chat_id="aa:bb", content="set the volume to thirty")
        turn = agent.begin_turn(msg, device_tools=client)
        text = "".join([e.text async for e in turn if isinstance(e, TextChunk)])
    finally:
        await agent.close()
    assert dev.state["volume"] == 30
    assert text == "Done, the volume is now 30."
    calls = [r for r in dev.requests if r.get("method") == "tools/call"]
    assert calls[-1]["params"] == {"name": "self.audio_speaker.set_volume", "arguments": {"volume": 30}}
