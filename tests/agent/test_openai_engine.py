from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web
from wren.agent.engines.openai import APOLOGY_DOWN, openai_tool_name
from wren.agent.events import TextChunk
from wren.agent.messages import InboundMessage

from tests.agent.fakes import XIAOZHI_TOOLS, BlockingTools, RecordingTools
from tests.agent.llm_server import text_chunks, tool_call_chunks
from tests.support.processes import free_port


@pytest.fixture
async def openai_agent(agent_factory, llm):
    return await agent_factory(engine="openai", openai_base_url=llm.base_url, openai_model="test-model",
                               openai_timeout_s=2.0, openai_max_tool_rounds=3)


async def chunks_of(agent, text: str, tools=None, key: str = "xiaozhi:dev-1") -> list[str]:
    msg = InboundMessage("xiaozhi", "dev", key.split(":", 1)[1], text)
    return [e.text async for e in agent.begin_turn(msg, device_tools=tools) if isinstance(e, TextChunk)]


async def test_streams_the_reply_as_it_arrives(openai_agent, llm):
    assert await chunks_of(openai_agent, "hi") == ["Hello", " from", " the model."]
    body = llm.requests[0]
    assert body["model"] == "test-model" and body["stream"] is True
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][-1] == {"role": "user", "content": "hi"}
    assert "tools" not in body  # no tools available, none offered


async def test_history_is_sent_on_the_next_turn(openai_agent, llm):
    await chunks_of(openai_agent, "my name is Ada")
    await chunks_of(openai_agent, "what is my name")
    assert llm.requests[1]["messages"][1:] == [
        {"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": "Hello from the model."},
        {"role": "user", "content": "what is my name"},
    ]


async def test_tool_call_deltas_are_assembled_and_the_result_fed_back(openai_agent, llm):
    def script(body: dict[str, Any]):
        if body["messages"][-1]["role"] == "tool":
            return text_chunks("The volume", " is now 30.")
        return tool_call_chunks(openai_tool_name("self.audio_speaker.set_volume"), '{"volume": 30}')

    llm.script = script
    tools = RecordingTools(XIAOZHI_TOOLS)
    reply = "".join(await chunks_of(openai_agent, "set the volume to thirty", tools=tools))
    assert tools.calls == [("self.audio_speaker.set_volume", {"volume": 30})]
    assert reply == "The volume is now 30."
    offered = [t["function"]["name"] for t in llm.requests[0]["tools"]]
    assert "self_audio_speaker_set_volume" in offered
    second = llm.requests[1]["messages"]
    assert second[-2]["tool_calls"][0]["function"] == {"name": "self_audio_speaker_set_volume",
                                                         "arguments": '{"volume": 30}'}
    assert second[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "true"}


async def test_tool_rounds_are_capped_and_the_last_request_offers_no_tools(openai_agent, llm):
    def script(body: dict[str, Any]):
        if "tools" not in body:
            return text_chunks("I give up on tools.")
        return tool_call_chunks("self_get_device_status", "{}", call_id=f"c{len(llm.requests)}")

    llm.script = script
    tools = RecordingTools(XIAOZHI_TOOLS)
    reply = "".join(await chunks_of(openai_agent, "status please", tools=tools))
    assert reply == "I give up on tools."
    assert len(llm.requests) == 4 and len(tools.calls) == 3  # 3 rounds (the cap) + the final answer


async def test_a_bad_tool_call_is_reported_to_the_model_not_crashed_on(openai_agent, llm):
    def script(body: dict[str, Any]):
        if body["messages"][-1]["role"] == "tool":
            return text_chunks("ok")
        return tool_call_chunks("no_such_tool", "{not json")

    llm.script = script
    assert await chunks_of(openai_agent, "x", tools=RecordingTools(XIAOZHI_TOOLS)) == ["ok"]
    assert llm.requests[1]["messages"][-1]["content"] == "Error: there is no tool named no_such_tool."


async def test_endpoint_down_gives_a_spoken_apology(agent_factory):
    agent = await agent_factory(engine="openai", openai_base_url=f"http://127.0.0.1:{free_port()}/v1",
                                openai_timeout_s=2.0)
    assert await chunks_of(agent, "hello") == [APOLOGY_DOWN]
    history, _ = await agent.store.load("xiaozhi:dev-1", "openai")
    assert [r.content for r in history] == ["hello", APOLOGY_DOWN]


async def test_http_error_gives_a_spoken_apology(openai_agent, llm):
    llm.script = lambda body: web.json_response({"error": {"message": "model not found"}}, status=404)
    assert await chunks_of(openai_agent, "hello") == [APOLOGY_DOWN]


async def test_a_stalled_stream_times_out_into_an_apology(openai_agent, llm):
    llm.stall_after = 2
    reply = await chunks_of(openai_agent, "hello")
    assert reply[0] == "Hello" and reply[-1].startswith(" Sorry")


async def test_non_streaming_answers_are_accepted(openai_agent, llm):
    llm.script = lambda body: web.json_response(
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Plain answer."}}]}
    )
    assert await chunks_of(openai_agent, "hello") == ["Plain answer."]


async def test_a_follow_up_during_a_tool_round_joins_the_next_request(openai_agent, llm):
    def script(body: dict[str, Any]):
        if body["messages"][-1] == {"role": "user", "content": "set the volume to 30"}:
            return tool_call_chunks("self_audio_speaker_set_volume", '{"volume": 30}')
        return text_chunks("Volume is 30, and your name is Ada.")

    llm.script = script
    tools = BlockingTools()
    openai_agent.server_tools = tools  # bus turns have no device: serve the tools from the server side
    await openai_agent.bus.publish_inbound(InboundMessage("chat", "u", "room", "set the volume to 30"))
    await asyncio.wait_for(tools.entered.wait(), 10)
    await openai_agent.bus.publish_inbound(InboundMessage("chat", "u", "room", "my name is Ada"))
    for _ in range(100):  # wait until the bus consumer has queued it into the active turn
        if openai_agent.sessions.queued("chat:room") == 1:
            break
        await asyncio.sleep(0.02)
    tools.release.set()
    reply = await asyncio.wait_for(openai_agent.bus.consume_outbound(), 10)
    assert reply.content == "Volume is 30, and your name is Ada."
    assert len(llm.requests) == 2
    assert [m["role"] for m in llm.requests[1]["messages"][-3:]] == ["assistant", "tool", "user"]
    assert llm.requests[1]["messages"][-1]["content"] == "my name is Ada"
    history, _ = await openai_agent.store.load("chat:room", "openai")
    assert [(r.role, r.content) for r in history] == [
        ("user", "set the volume to 30"),
        ("user", "my name is Ada"),
        ("assistant", "Volume is 30, and your name is Ada."),
    ]
