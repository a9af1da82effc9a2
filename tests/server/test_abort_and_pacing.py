"""`abort` cancels exactly the live turn; reply audio is paced on the device's playback clock."""

from __future__ import annotations

import asyncio

from tests.server.helpers import assert_complete_reply
from tests.support.device import DEVICE_TOOLS, TestDevice


async def test_abort_gets_prompt_tts_stop_and_nothing_of_that_turn_follows(server):
    async with TestDevice(server.ws_url) as dev:
        await dev.connect()
        await asyncio.wait_for(dev.mcp_ready.wait(), 15)
        await dev.detect("what can you do")  # a long (~18 s) answer
        start = await dev.wait_json(lambda m: m.get("type") == "tts" and m.get("state") == "start", 30)
        assert start
        # Let a few frames play, then press the button.
        await dev.wait_for(lambda r: r.kind == "audio", 30)
        await asyncio.sleep(0.5)
        before_abort = len(dev.received)
        await dev.abort()
        # Promptly: within 5 s, while ~15 s of the answer were still to be played.
        stop = await dev.wait_for(
            lambda r: r.kind == "json" and r.msg.get("type") == "tts" and r.msg.get("state") == "stop",
            5, since=before_abort)
        # Watch the socket for longer than the cancelled reply had left to send: nothing of it follows.
        await asyncio.sleep(3.0)
        after = dev.received[dev.received.index(stop) + 1:]
        assert [r for r in after if r.kind == "audio"] == []
        assert [r.msg for r in after if r.kind == "json" and r.msg.get("type") in ("tts", "llm", "stt")] == []
        # The conversation history keeps only what was spoken before the abort, marked interrupted.
        spoken = [r.msg["text"] for r in dev.received[:before_abort]
                  if r.kind == "json" and r.msg.get("state") == "sentence_start"]
        history, _ = server.call(server.server.agent.store.load(f"xiaozhi:{dev.device_id}", "builtin"))
        assert [(h.role, h.content) for h in history[-2:]] == [("user", "what can you do"),
                                                               ("assistant", " ".join(spoken))]
        assert history[-1].meta.get("interrupted") is True
        assert len(spoken) < 5, "the full answer has nine sentences"
        # The session is fine: the next question is answered normally.
        await dev.detect("what time is it")
        reply = await dev.next_reply(timeout=30)
        while reply.stt != "what time is it":  # skip the aborted turn's (start … stop) pair
            reply = await dev.next_reply(timeout=30)
        assert_complete_reply(dev, reply)


async def test_abort_during_a_pending_device_tool_call_drops_everything_that_turn_would_say(server):
    """78 #1024: after an abort, the answer to a tool call made by the cancelled turn must not
    bring it back to life (no new tts start, sentence, audio or further MCP action)."""
    async with TestDevice(server.ws_url, tool_delay=1.5) as dev:
        await dev.connect()
        await asyncio.wait_for(dev.mcp_ready.wait(), 15)
        await dev.detect("set the volume to 30")
        await dev.wait_json(lambda m: m.get("type") == "tts" and m.get("state") == "start", 30)
        await dev.wait_json(lambda m: m.get("type") == "mcp" and m["payload"].get("method") == "tools/call",
                            30)
        before_abort = len(dev.received)
        await dev.abort()
        stop = await dev.wait_json(lambda m: m.get("type") == "tts" and m.get("state") == "stop", 5,
                                   since=before_abort)
        assert stop
        await asyncio.sleep(3.0)  # the device answers the call at 1.5 s
        after = dev.received[before_abort:]
        assert [r for r in after if r.kind == "audio"] == []
        late = [r.msg for r in after
                if r.kind == "json" and r.msg.get("type") in ("tts", "llm", "stt", "mcp")]
        assert late == [stop]
        assert len(dev.tool_calls) == 1


async def test_abort_while_idle_is_still_answered_with_tts_stop(server):
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.abort("wake_word_detected")
        msg = await dev.wait_json(lambda m: m.get("type") == "tts", 5)
        assert msg == {"type": "tts", "state": "stop", "session_id": dev.session_id}


async def test_long_reply_is_paced_never_more_than_a_second_ahead_of_playback(server):
    # Three device tools make the capability answer about 10 s of speech.
    async with TestDevice(server.ws_url, tools=DEVICE_TOOLS[:3]) as dev:
        await dev.connect()
        await asyncio.wait_for(dev.mcp_ready.wait(), 15)
        await dev.detect("what can you do")
        reply = await dev.next_reply(timeout=60)
        assert reply.audio_s >= 8, reply.text
        assert_complete_reply(dev, reply)
        # The device's playback clock starts with the first frame; frame i plays at first + i * 60 ms,
        # unless the stream ran dry (then playback restarts at that frame's arrival).
        play_at = reply.frames[0].t
        worst_lead = 0.0
        for frame in reply.frames:
            play_at = max(play_at, frame.t)
            worst_lead = max(worst_lead, play_at - frame.t)
            play_at += 0.060
        assert worst_lead <= 1.0, f"sent {worst_lead:.2f} s ahead of playback"
        # And not in a burst: the reply took about as long to arrive as it takes to play.
        assert reply.frames[-1].t - reply.frames[0].t >= reply.audio_s - 1.0
