"""Failures behind the session (TTS, LLM, a hung device tool) never leave a device stuck in speaking.

Each case goes over the wire: the device must get its `tts stop`, and the connection must stay usable
for the next turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

from tests.server.conftest import ServerThread, make_config
from tests.support.device import TestDevice
from tests.support.processes import free_port


class BreakableTts:
    """The real piper engine, with a switch that makes synthesis fail after the first chunk (a TTS that
    dies mid-reply: out of memory, a broken voice file, a remote TTS dropping the connection)."""

    def __init__(self, tts: Any) -> None:
        self.tts = tts
        self.name = tts.name
        self.sample_rate = tts.sample_rate
        self.broken = False

    def synthesize(self, text: str) -> Iterator[bytes]:
        for chunk in self.tts.synthesize(text):
            yield chunk
            if self.broken:
                raise RuntimeError("synthesis failed (test)")


async def test_tts_failing_mid_reply_still_ends_with_tts_stop_and_the_next_turn_works(speech, tmp_path):
    tts = BreakableTts(speech.tts)
    server = ServerThread(make_config(tmp_path), dataclasses.replace(speech, tts=tts)).start()
    try:
        async with TestDevice(server.ws_url, mcp=False) as dev:
            await dev.connect()
            tts.broken = True
            await dev.detect("what time is it")
            broken = await dev.next_reply(timeout=60)  # returns only once `tts stop` has arrived
            assert broken.stop_t > broken.start_t

            tts.broken = False
            await dev.detect("what time is it")
            reply = await dev.next_reply(timeout=60)
            assert reply.frames and reply.sentences, dev.summary()
    finally:
        server.stop()


async def test_dead_llm_endpoint_gives_a_spoken_apology_then_tts_stop(speech, tmp_path):
    config = make_config(tmp_path, agent={"engine": "openai",
                                          "openai_base_url": f"http://127.0.0.1:{free_port()}/v1",
                                          "openai_timeout_s": 3.0})
    server = ServerThread(config, speech).start()
    try:
        async with TestDevice(server.ws_url, mcp=False) as dev:
            await dev.connect()
            await dev.detect("what is the capital of france")
            reply = await dev.next_reply(timeout=60)
            assert reply.sentences and reply.frames, dev.summary()  # an apology, spoken
            assert "sorry" in reply.text.lower(), reply.text
    finally:
        server.stop()


async def test_hung_device_tool_times_out_into_words_then_tts_stop(speech, tmp_path):
    server = ServerThread(make_config(tmp_path, mcp={"tool_timeout_s": 1.0}), speech).start()
    try:
        # The device lists its tools but answers a call only after 10 minutes: a hung tool.
        async with TestDevice(server.ws_url, tool_delay=600) as dev:
            await dev.connect()
            await asyncio.wait_for(dev.mcp_ready.wait(), 15)
            await dev.detect("set the volume to 30")
            reply = await dev.next_reply(timeout=60)
            assert dev.tool_calls and dev.tool_calls[0]["name"] == "self.audio_speaker.set_volume"
            assert reply.sentences and reply.frames, dev.summary()
            assert "did not answer in time" in reply.text, reply.text  # said so, no false success

            await dev.detect("what time is it")  # the session is still usable
            assert (await dev.next_reply(timeout=60)).frames
    finally:
        server.stop()
