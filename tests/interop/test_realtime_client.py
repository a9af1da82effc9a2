"""A realtime streaming client that also takes typed queries.

Imitates py-xiaozhi in its realtime conversation mode, or firmware built with device-side AEC
(`RealtimeClient`). It sends `listen start` with `"mode":"realtime"` once, then streams 16 kHz Opus in
60 ms frames without a break, real time: silence between utterances, and it keeps streaming while the
server speaks (reference §5.1 `mode`, §8.2 "Realtime", §9.1). Its user can also type a query, sent as
`listen detect` with the text (reference §5.1: "Clients such as py-xiaozhi and xinnan also use `detect`
with arbitrary `text` to inject a typed user query").

After `tts stop` a realtime device is listening again and sends no new `listen start`, because its
microphone never stopped (reference §5.1, last paragraph; §5.5 `stop`; §9.4). The server has to go on
listening to the stream after a typed query too.
"""

from __future__ import annotations

import pytest

from tests.interop.clients import RealtimeClient, heard, is_stt
from tests.server.helpers import assert_complete_reply, plain, words
from tests.support.received import is_tts


@pytest.mark.spoken
async def test_realtime_stream_answers_a_typed_query_then_hears_speech_without_a_new_listen_start(server):
    async with RealtimeClient(server.ws_url) as client:
        await client.connect()
        await client.open_microphone()
        await client.detect("what time is it")

        typed = await client.next_reply(timeout=30)
        assert plain(typed.stt or "") == "what time is it", client.summary()
        assert_complete_reply(client, typed)
        assert "it's" in words(typed.text), typed.text

        # The user now speaks into the same stream; the client sends no new `listen start`.
        after_typed = len(client.received)
        await client.speak("what day is it")
        stt = await client.wait_for(is_stt, 15, since=after_typed)
        assert stt.msg is not None and {"what", "day"} <= heard(stt.msg["text"]), stt.msg
        spoken = await client.next_reply(timeout=30)
        assert spoken.stt == stt.msg["text"]
        assert_complete_reply(client, spoken)
        assert {"today", "is"} <= words(spoken.text), spoken.text
        # One reply to each request, nothing else.
        assert sum(1 for r in client.received if is_tts("stop")(r)) == 2, client.summary()
