"""Client behaviours Wren already handles and must keep handling: one quick check each.

- Audio before any `listen`. The firmware's wake-word pre-roll: about 2 s of Opus sent as a burst,
  faster than real time, before `listen detect` / `listen start` (reference §5.1, "Wake-word
  sequence"). Clients that open the mic early do the same. Dropped; the session stays usable.
- `abort` from the button while speaking has no `reason` key at all (reference §5.2). Some clients
  send `"reason":""`. Either way the device stays in speaking until the server sends `tts stop`
  (§5.2, §10 row 5, 78 #337), so both must be answered with it, at once.
- An empty token: `Authorization: Bearer ` with nothing after it. This comes from clients that always
  send the header, even when the token they stored is empty (the firmware sends the header only for a
  non-empty token, §1.2). In the default open auth mode it connects.
- A WebSocket ping from the client. Clients built on Python's `websockets` ping every 20 s unless told
  otherwise (the §1.2 pitfall, seen from the other side). The server answers with a pong and the
  session carries on (docs/server.md "Connecting": the server answers pings a client sends).
- `tts stop` only after the last audio frame has played. The firmware drops audio that arrives after
  it leaves speaking, so an early stop cuts off the last words (§5.5, §9.3, §10 row 3, 78 #1181). The
  server paces the audio, so `tts stop` comes no earlier than the reply's audio duration after the
  first frame, less the pre-buffer.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.interop.clients import NO_REASON, XiaozhiClient, is_stt
from tests.server.helpers import assert_complete_reply, plain
from tests.support.received import is_tts
from tests.support.spoken import spoken_pcm

# The server sends its pre-buffer (5 + 1 frames, 0.36 s) at once: that much may arrive ahead of playback.
PREBUFFER_MARGIN_S = 0.4


async def test_audio_before_any_listen_is_dropped_and_the_session_stays_usable(server):
    async with XiaozhiClient(server.ws_url) as client:
        await client.connect()
        before = len(client.received)
        await client.send_audio(spoken_pcm("what day is it"), realtime=False)  # a pre-roll burst
        await asyncio.sleep(1.5)
        early = [m for m in client.json_messages(before) if m.get("type") in ("stt", "tts")]
        assert early == [], client.summary()

        await client.detect("what time is it")
        reply = await client.next_reply(timeout=30)
        assert plain(reply.stt or "") == "what time is it"
        assert_complete_reply(client, reply)
        assert sum(1 for r in client.received if is_stt(r)) == 1, "the early audio became no turn"


@pytest.mark.parametrize("reason", [NO_REASON, ""], ids=["no_reason_key", "empty_reason"])
async def test_abort_while_speaking_is_answered_with_tts_stop(server, reason):
    async with XiaozhiClient(server.ws_url) as client:
        await client.connect()
        await client.detect("what can you do")  # a reply several seconds long
        await client.wait_for(lambda r: r.kind == "audio", 30)
        await asyncio.sleep(0.3)
        before = len(client.received)
        await client.abort(reason)
        stop = await client.wait_for(is_tts("stop"), 2.0, since=before)
        assert stop.msg == {"type": "tts", "state": "stop", "session_id": client.session_id}
        await asyncio.sleep(1.0)
        after = client.received[client.received.index(stop) + 1 :]
        assert [r for r in after if r.kind == "audio"] == [], "audio of the aborted reply after its tts stop"

        await client.detect("thank you")  # the session carries on
        await client.wait_json(lambda m: m.get("type") == "stt" and m.get("text") == "thank you", 10)


async def test_empty_bearer_token_in_open_auth_mode_connects(server):
    async with XiaozhiClient(server.ws_url, token="") as client:  # "Authorization: Bearer "
        assert client.headers["Authorization"] == "Bearer "
        hello = await client.connect()
        assert hello["transport"] == "websocket"
        await client.detect("thank you")
        reply = await client.next_reply(timeout=30)
        assert "welcome" in reply.text.lower(), reply.text
        assert client.close_code is None


async def test_websocket_ping_from_the_client_is_answered_with_pong_and_the_session_carries_on(server):
    async with XiaozhiClient(server.ws_url) as client:
        await client.connect()
        assert client.ws is not None
        await client.ws.ping(b"are you there")
        pong = await client.wait_for(lambda r: r.kind == "pong", 5)
        assert pong.payload == b"are you there"

        await client.detect("thank you")
        reply = await client.next_reply(timeout=30)
        assert "welcome" in reply.text.lower(), reply.text
        assert client.close_code is None


async def test_tts_stop_arrives_only_after_the_reply_audio_has_played(server):
    async with XiaozhiClient(server.ws_url) as client:
        await client.connect()
        await client.detect("what day is it")
        reply = await client.next_reply(timeout=30)
        assert reply.frames, client.summary()
        assert reply.audio_s >= 1.0, reply.text  # long enough for pacing to show
        assert reply.events[-1].kind == "json" and is_tts("stop")(reply.events[-1])  # after the last frame
        after_first_frame = reply.stop_t - reply.frames[0].t
        assert after_first_frame >= reply.audio_s - PREBUFFER_MARGIN_S, (after_first_frame, reply.audio_s)
