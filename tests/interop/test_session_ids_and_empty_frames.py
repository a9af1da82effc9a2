"""Clients that send empty binary frames while idle, or session ids that are not the server's.

- Empty binary frames while nothing is being recorded. Web clients send their end-of-recording mark
  (an empty binary message, see test_browser_client.py) when no recording is running too: stop pressed
  twice, a recording that never started. The rule the server follows is "binary while not listening:
  dropped and counted" (docs/server.md "Errors and bad input"). An empty frame is not even audio
  (§9.1: Opus packets are at least one byte), so it must not start, end or break anything.
- `session_id` values that are not the server's. The firmware puts its `session_id` into every message
  and keeps the previous one when a server hello has none (reference §3.2). Clients send `""` before
  they have stored one (the legacy `iot` example in §5.7 has `"session_id":""`). A reconnected client
  may send the id of its last connection. Old clients leave the key out, and the MQTT gateway sends
  `null` (docs/protocol.md §4). The server knows its session by the socket, so such a message still
  counts, and the reply carries the server's own id (§3.2, §11.2 item 5).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from tests.interop.clients import ABSENT, XiaozhiClient
from tests.server.helpers import assert_complete_reply, plain


async def test_empty_binary_frames_while_idle_are_ignored_and_the_session_stays_usable(server):
    async with XiaozhiClient(server.ws_url) as client:
        await client.connect()
        before = len(client.received)
        for _ in range(5):
            await client.send_binary(b"")
        await asyncio.sleep(1.0)
        answered = [m for m in client.json_messages(before) if m.get("type") not in ("mcp",)]
        assert answered == [], client.summary()  # no turn, no error, no prompt
        assert client.close_code is None and not client.closed.is_set()

        await client.detect("what time is it")
        reply = await client.next_reply(timeout=30)
        assert plain(reply.stt or "") == "what time is it"
        assert_complete_reply(client, reply)


@pytest.mark.parametrize("session_id", ["", str(uuid.uuid4()), None, ABSENT],
                         ids=["empty", "not_the_servers", "null", "absent"])
async def test_typed_query_is_answered_whatever_session_id_it_carries(server, session_id):
    async with XiaozhiClient(server.ws_url) as client:
        await client.connect()
        await client.detect("what time is it", session_id=session_id)
        reply = await client.next_reply(timeout=30)
        assert plain(reply.stt or "") == "what time is it", client.summary()
        assert_complete_reply(client, reply)  # its tts stop carries the server's session id
        replied = {m.get("session_id") for m in client.json_messages() if m.get("type") in ("stt", "tts")}
        assert replied == {client.session_id}
