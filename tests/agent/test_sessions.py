from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from wren.agent.events import TextChunk
from wren.agent.messages import InboundMessage

from tests.agent.fakes import BlockingTools

REPO = Path(__file__).resolve().parents[2]


def device_msg(device: str, text: str) -> InboundMessage:
    return InboundMessage(channel="xiaozhi", sender_id=device, chat_id=device, content=text)


async def say(agent, text: str, key: str) -> str:
    return (await agent.process_direct(text, session_key=key)).content


async def test_session_key_is_override_or_channel_and_chat_id():
    assert device_msg("aa:bb", "x").session_key == "xiaozhi:aa:bb"
    msg = InboundMessage("telegram", "u1", "42", "x", session_key_override="telegram:thread:7")
    assert msg.session_key == "telegram:thread:7"


async def test_two_turn_memory_survives_restart_and_stays_in_its_session(agent_factory, tmp_path):
    data = tmp_path / "data"
    first = await agent_factory(data)
    await say(first, "my name is Ada", "xiaozhi:dev-a")
    assert await say(first, "what is my name", "xiaozhi:dev-a") == "Your name is Ada."
    await first.close()

    second = await agent_factory(data)
    assert await say(second, "what is my name", "xiaozhi:dev-a") == "Your name is Ada."
    assert "don't know your name" in await say(second, "what is my name", "xiaozhi:dev-b")


async def test_same_key_shares_history_across_voice_and_text_entry(agent):
    turn = agent.begin_turn(device_msg("dev-1", "my name is Grace"))
    async for _ in turn:
        pass
    assert await say(agent, "what is my name", "xiaozhi:dev-1") == "Your name is Grace."


async def test_history_is_trimmed_to_the_limit_but_the_name_is_kept(agent_factory):
    agent = await agent_factory(history_max_messages=4)
    await say(agent, "my name is Ada", "cli:t")
    for _ in range(3):
        await say(agent, "hello", "cli:t")
    history, state = await agent.store.load("cli:t", "builtin")
    assert len(history) == 4 and history[0].role == "user"
    assert all(row.content != "my name is Ada" for row in history)
    assert state == {"user_name": "Ada"}
    assert await say(agent, "what is my name", "cli:t") == "Your name is Ada."


async def test_database_is_wal_and_a_turn_is_committed_when_it_returns(agent, tmp_path):
    await say(agent, "hello", "cli:wal")
    conn = sqlite3.connect(tmp_path / "data" / "sessions.sqlite3")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = conn.execute("SELECT role FROM messages WHERE session_key='cli:wal' ORDER BY id").fetchall()
        assert rows == [("user",), ("assistant",)]
    finally:
        conn.close()


async def test_a_crash_after_a_turn_loses_nothing_committed(agent_factory, tmp_path):
    data = tmp_path / "crash"
    script = textwrap.dedent(f"""
        import asyncio, os
        from wren.config import Config
        from wren.agent.loop import AgentLoop
        async def main():
            config = Config()
            config.server.data_dir = {str(data)!r}
            agent = AgentLoop.from_config(config)
            await agent.start()
            await agent.process_direct("my name is Ada", session_key="xiaozhi:crash")
            os._exit(9)  # no close(), no flush: a hard crash
        asyncio.run(main())
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, timeout=60)
    assert proc.returncode == 9
    agent = await agent_factory(data)
    assert await say(agent, "what is my name", "xiaozhi:crash") == "Your name is Ada."


async def test_barge_in_records_only_what_was_spoken(agent):
    turn = agent.begin_turn(device_msg("dev-1", "what can you do"))
    first = None
    async for event in turn:
        if isinstance(event, TextChunk):
            first = event.text
            break
    assert first
    await turn.interrupt("I can tell you the time")
    history, _ = await agent.store.load("xiaozhi:dev-1", "builtin")
    assert [(r.role, r.content, r.meta) for r in history] == [
        ("user", "what can you do", {}),
        ("assistant", "I can tell you the time", {"interrupted": True}),
    ]


async def test_barge_in_cancels_a_pending_tool_call_and_frees_the_session(agent):
    tools = BlockingTools()
    turn = agent.begin_turn(device_msg("dev-1", "set the volume to 30"), device_tools=tools)
    consumer = asyncio.create_task(turn.text())
    await asyncio.wait_for(tools.entered.wait(), 10)
    await asyncio.wait_for(turn.interrupt(""), 10)
    await asyncio.wait_for(consumer, 10)
    assert tools.cancelled == 1
    assert "hello" in (await asyncio.wait_for(say(agent, "hello", "xiaozhi:dev-1"), 10)).lower()
    history, _ = await agent.store.load("xiaozhi:dev-1", "builtin")
    assert [r.role for r in history] == ["user", "user", "assistant"]  # nothing was spoken of turn 1


async def test_one_turn_at_a_time_per_session_and_concurrent_across_sessions(agent):
    tools = BlockingTools()
    held = agent.begin_turn(device_msg("dev-1", "set the volume to 30"), device_tools=tools)
    held_text = asyncio.create_task(held.text())
    await asyncio.wait_for(tools.entered.wait(), 10)

    same = asyncio.create_task(agent.begin_turn(device_msg("dev-1", "hello")).text())
    other = await asyncio.wait_for(agent.begin_turn(device_msg("dev-2", "hello")).text(), 10)
    assert "Hello" in other
    await asyncio.sleep(0.2)
    assert not same.done()  # waits for dev-1's first turn

    tools.release.set()
    assert "volume is now 30" in await asyncio.wait_for(held_text, 10)
    assert "Hello" in await asyncio.wait_for(same, 10)
    history, _ = await agent.store.load("xiaozhi:dev-1", "builtin")
    assert [r.content for r in history if r.role == "user"] == ["set the volume to 30", "hello"]


async def test_global_gate_limits_concurrent_turns(agent_factory):
    agent = await agent_factory(max_concurrent_turns=1)
    tools = BlockingTools()
    held = asyncio.create_task(
        agent.begin_turn(device_msg("dev-1", "set the volume to 30"), device_tools=tools).text()
    )
    await asyncio.wait_for(tools.entered.wait(), 10)
    other = asyncio.create_task(agent.begin_turn(device_msg("dev-2", "hello")).text())
    await asyncio.sleep(0.2)
    assert not other.done()
    tools.release.set()
    await asyncio.wait_for(held, 10)
    assert "Hello" in await asyncio.wait_for(other, 10)


async def _drain_outbound(agent, count: int) -> list:
    return [await asyncio.wait_for(agent.bus.consume_outbound(), 10) for _ in range(count)]


async def test_bus_follow_ups_mid_turn_are_answered_at_a_safe_boundary(agent):
    tools = BlockingTools()
    agent.server_tools = tools  # the bus path has no device; serve the tools from the server side
    await agent.bus.publish_inbound(InboundMessage("chat", "u", "room", "set the volume to 30"))
    await asyncio.wait_for(tools.entered.wait(), 10)
    await agent.bus.publish_inbound(InboundMessage("chat", "u", "room", "my name is Ada"))
    await agent.bus.publish_inbound(InboundMessage("chat", "u", "room", "what is my name"))
    for _ in range(100):  # wait until the bus consumer has queued both into the active turn
        if agent.sessions.queued("chat:room") == 2:
            break
        await asyncio.sleep(0.02)
    tools.release.set()
    replies = await _drain_outbound(agent, 2)
    assert "volume is now 30" in replies[0].content
    assert "Nice to meet you, Ada" in replies[1].content and "Your name is Ada." in replies[1].content
    assert all(r.channel == "chat" and r.chat_id == "room" for r in replies)
    history, _ = await agent.store.load("chat:room", "builtin")
    assert [r.content for r in history if r.role == "user"] == [
        "set the volume to 30", "my name is Ada", "what is my name"
    ]


async def test_bus_never_drops_follow_ups_beyond_the_queue_and_injection_caps(agent_factory):
    agent = await agent_factory(history_max_messages=500)
    tools = BlockingTools()
    agent.server_tools = tools
    await agent.bus.publish_inbound(InboundMessage("chat", "u", "room", "set the volume to 30"))
    await asyncio.wait_for(tools.entered.wait(), 10)
    for i in range(25):  # 20 fit the pending queue, 5 become their own turns
        await agent.bus.publish_inbound(InboundMessage("chat", "u", "room", f"hello number {i}"))
    tools.release.set()

    async def users() -> list[str]:
        history, _ = await agent.store.load("chat:room", "builtin")
        return [r.content for r in history if r.role == "user"]

    for _ in range(200):
        if len(await users()) == 26:
            break
        await asyncio.sleep(0.05)
    found = await users()
    assert sorted(found[1:]) == sorted(f"hello number {i}" for i in range(25))
