"""Clients that send uplink Opus in 20, 40 or 60 ms frames.

Imitates the clients whose frame duration is not the firmware's 60 ms. Python client libraries encode
shorter frames: the `xiaozhi-client` package, for one, defaults to `frame_duration` 20 ms. Firmware can
also be built with another `OPUS_FRAME_DURATION_MS`.
The hello announces it in `audio_params.frame_duration` (reference §3.1: `audio_params` describes the
uplink). The server must decode by that value, not by a hard-coded 960 samples (§9.1 "Server decoders
should derive the frame size from hello `frame_duration`", §10 row 8, xinnan #2407).

Each duration speaks one sentence in auto mode, so the server's VAD also has to find the end of the
utterance in frames of that size (§5.1 `auto`, §8.2 "Auto"). One sentence a test keeps the spoken part
short.
"""

from __future__ import annotations

import pytest

from tests.interop.clients import XiaozhiClient, heard
from tests.server.helpers import AUTO_TAIL_MS, assert_complete_reply, words


@pytest.mark.spoken
@pytest.mark.parametrize("frame_ms", [20, 40, 60])
async def test_spoken_request_in_frames_of_the_announced_duration_is_answered(server, frame_ms):
    async with XiaozhiClient(server.ws_url, frame_ms=frame_ms) as client:
        await client.connect()
        await client.listen_start("auto")
        await client.say("what time is it")
        await client.send_silence(AUTO_TAIL_MS)  # the mic stays open; the server's VAD ends the turn
        reply = await client.next_reply(timeout=30)
        assert {"what", "time"} <= heard(reply.stt), (frame_ms, reply.stt)
        assert_complete_reply(client, reply)
        assert "it's" in words(reply.text), reply.text
