"""`[limits]` (docs/server.md "Limits"): what one device may ask of the server, and what happens past it.

The gates themselves on a synthetic clock, then each limit against the real server: a typed-text flood, an
oversized typed text, an uplink far faster than real time, a hostile device tool list.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import opuslib_next
import websockets
from wren.session.limits import UPLINK_CLOSE_AFTER_S, TypedGate, UplinkGate, cut_text
from wren.session.replies import MAX_ANNOUNCEMENTS, ReplyQueue
from wren.session.reply import TurnRequest

from shared_protocol import audio, messages
from shared_protocol.constants import CLOSE_POLICY
from tests.server.helpers import assert_complete_reply, session_of, speak, until, words
from tests.support.device import FRAME_MS, TestDevice, _tool

# ---- the gates, on a synthetic clock ------------------------------------------------------------------


def _feed(gate: UplinkGate, factor: float, seconds: float, start: float = 1000.0) -> tuple[int, int, float]:
    """Frames of 60 ms at `factor` × real time for `seconds`: (sent, admitted, when too_fast was set)."""
    step = FRAME_MS / 1000 / factor
    sent = admitted = 0
    closed_at = -1.0
    now = start
    while now < start + seconds:
        sent += 1
        admitted += gate.admit(now)
        if gate.too_fast and closed_at < 0:
            closed_at = now - start
        now += step
    return sent, admitted, closed_at


def test_uplink_gate_passes_real_time_and_a_backlog_burst():
    gate = UplinkGate(1.5, "dev", now=1000.0)
    sent, admitted, closed_at = _feed(gate, 1.0, 60)
    assert admitted == sent and closed_at < 0 and gate.dropped == 0
    burst = UplinkGate(1.5, "dev", now=1000.0)
    assert all(burst.admit(1000.0) for _ in range(int(5.0 / 0.06)))  # 5 s of backlog at once


def test_uplink_gate_drops_above_the_factor_and_closes_only_a_sustained_flood():
    twice = UplinkGate(1.5, "dev", now=1000.0)
    sent, admitted, closed_at = _feed(twice, 2.0, 60)
    assert closed_at < 0  # 2 × real time: dropped down to 1.5 ×, never closed
    assert abs(admitted * 0.06 - (60 * 1.5 + 6)) < 1.0
    flood = UplinkGate(1.5, "dev", now=1000.0)
    sent, admitted, closed_at = _feed(flood, 20.0, 30)
    assert UPLINK_CLOSE_AFTER_S <= closed_at <= UPLINK_CLOSE_AFTER_S + 1.5
    assert flood.dropped == sent - admitted > 0


def test_typed_gate_refuses_the_excess_and_refills():
    gate = TypedGate(30, 1000, "dev")
    now = gate._at
    assert sum(gate.admit(now) for _ in range(500)) == 30
    assert gate.refused == 470
    assert not gate.admit(now + 1.0)
    assert gate.admit(now + 3.0)  # one every 2 s again


def test_cut_text_keeps_whole_words():
    assert cut_text("short", 1000) == "short"
    assert cut_text("alpha beta gamma", 12) == "alpha beta"
    assert cut_text("alpha beta gamma", 11) == "alpha beta"
    assert cut_text("x" * 50, 10) == "x" * 10  # no boundary to cut at: cut hard


def _queue(max_waiting: int = 3) -> ReplyQueue:
    async def ended(_turn: Any) -> bool:
        return True

    return ReplyQueue(SimpleNamespace(device_id="d", timing_sink=None), "dev", ended, max_waiting)  # type: ignore[arg-type]


def _waiting(queue: ReplyQueue) -> list[str]:
    return [t.request.user_text or t.request.prompt_text or "" for t in queue._waiting]


def test_reply_queue_coalesces_typed_queries_and_keeps_announcements():
    queue = _queue(3)
    for text in ("a", "b", "c", "d"):
        queue.queue(TurnRequest(user_text=text, typed=True))
    assert _waiting(queue) == ["b", "c", "d"]  # the latest question wins
    queue.queue(TurnRequest(prompt_text="timer", announcement=True))
    queue.queue(TurnRequest(user_text="spoken"))  # not typed: pushes out the oldest reply
    assert _waiting(queue) == ["c", "d", "timer", "spoken"]
    queue.queue(TurnRequest(user_text="e", typed=True))
    assert _waiting(queue) == ["d", "timer", "spoken", "e"]  # the oldest waiting typed one, not "spoken"
    for i in range(MAX_ANNOUNCEMENTS):
        queue.queue(TurnRequest(prompt_text=f"t{i}", announcement=True))
    assert sum(t.request.announcement for t in queue._waiting) == MAX_ANNOUNCEMENTS + 1


# ---- against the real server --------------------------------------------------------------------------


def _starts(dev: TestDevice) -> int:
    return sum(1 for m in dev.json_messages() if m.get("type") == "tts" and m.get("state") == "start")


async def test_a_typed_flood_is_bounded_and_another_devices_turn_is_answered_normally(server):
    limits = server.config.limits
    async with TestDevice(server.ws_url, mcp=False) as flood, TestDevice(server.ws_url, mcp=False) as other:
        await flood.connect()
        await other.connect()
        session = session_of(server, flood)
        other_turn = asyncio.create_task(speak(other, "what day is it", "manual"))
        texts = [messages.encode(messages.listen_detect(flood.session_id, f"thank you {i}"))
                 for i in range(500)]
        for text in texts:
            await flood.send_text(text)
        await flood.send_json({"type": "ping", "session_id": flood.session_id})
        await flood.wait_json(lambda m: m.get("type") == "pong", 10)  # every text before it was handled
        assert len(session.replies._waiting) <= limits.queued_replies
        assert session.dropped_counts()["typed_flood"] >= 500 - limits.typed_per_minute - 2

        await other_turn
        stopped_at = time.monotonic()
        reply = await other.next_reply(timeout=30)
        assert reply.frames[0].t - stopped_at < 4.0, "the other device's first audio came late"
        assert {"what", "day"} <= words(reply.stt or "")
        assert_complete_reply(other, reply)

        await until(lambda: not session.replies.busy, 60, "the flood's replies ended")
        await asyncio.sleep(0.5)
        spoken = _starts(flood)
        assert 1 <= spoken <= limits.queued_replies + 1, flood.summary()
        # Still responsive: pings, and a typed question once the rate allows it again.
        before = len(flood.received)
        await flood.send_json({"type": "ping", "session_id": flood.session_id})
        await flood.wait_json(lambda m: m.get("type") == "pong", 2, since=before)
        await flood.detect("thank you")
        stt = await flood.wait_json(lambda m: m.get("type") == "stt", 30, since=before)
        assert stt["text"] == "thank you"


async def test_an_oversized_typed_text_is_cut_at_a_word_boundary(server):
    limit = server.config.limits.typed_text_chars
    text = "thank you " + " ".join(f"word{i}" for i in range(400))
    assert len(text) > limit
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.detect(text)
        stt = (await dev.next_reply(timeout=60)).stt or ""
    assert 0 < len(stt) <= limit
    assert text.startswith(stt) and text[len(stt)] == " "


async def test_an_uplink_flood_is_dropped_then_closed_with_1008(server):
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        session = session_of(server, dev)
        encoder = opuslib_next.Encoder(dev.sample_rate, 1, opuslib_next.APPLICATION_VOIP)
        samples = dev.sample_rate * FRAME_MS // 1000
        frame = audio.pack(dev.protocol_version, bytes(encoder.encode(bytes(samples * 2), samples)))
        await dev.listen_start("manual")
        start = time.monotonic()
        sent = 0
        while not dev.closed.is_set() and time.monotonic() - start < 20:
            try:
                await dev.send_binary(frame)  # 20 × real time: a 60 ms frame every 3 ms
            except websockets.ConnectionClosed:
                break
            sent += 1
            delay = start + sent * FRAME_MS / 1000 / 20 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if sent == 300:
                assert session.dropped_counts()["uplink_flood"] > 0  # dropped long before the close
        code, reason = await dev.wait_closed(5)
        elapsed = time.monotonic() - start
    assert code == CLOSE_POLICY and "real time" in reason
    assert UPLINK_CLOSE_AFTER_S <= elapsed <= UPLINK_CLOSE_AFTER_S + 4
    # 20 × against 1.5 × real time: all but about one frame in 13 is dropped (the rate itself: the gate tests)
    assert session.dropped_counts()["uplink_flood"] > sent * 0.7, sent


async def test_a_hostile_device_tool_list_is_capped_and_the_session_works(server):
    limits = server.config.limits
    many = [_tool(f"self.hostile.tool_{i}", "Does nothing at all.") for i in range(1000)]
    async with TestDevice(server.ws_url, tools=many) as dev:
        await dev.connect()
        session = session_of(server, dev)
        await until(lambda: session.tools.mcp is not None and session.tools.mcp.tools, 30, "tools listed")
        assert len(session.tools.mcp.tools) == limits.device_tools
        await dev.detect("thank you")
        assert "welcome" in (await dev.next_reply(timeout=30)).text.lower()
    big = [_tool(f"self.big.tool_{i}", "x" * 10_000) for i in range(40)]  # 400 KB of JSON
    async with TestDevice(server.ws_url, tools=big) as dev:
        dev._mcp.max_page_bytes = 60_000  # pages that hold these tools (each page < max_frame_bytes)
        await dev.connect()
        session = session_of(server, dev)
        await until(lambda: session.tools.mcp is not None and session.tools.mcp.tools, 30, "tools listed")
        taken = session.tools.mcp.tools
        assert 0 < len(taken) < len(big)
        assert len(taken) * 10_000 <= limits.device_tool_bytes
        await dev.detect("thank you")
        assert "welcome" in (await dev.next_reply(timeout=30)).text.lower()
