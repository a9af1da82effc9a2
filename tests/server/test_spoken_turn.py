"""The spoken turn end to end: piper speech in, `stt` + framed, paced, decodable spoken reply out."""

from __future__ import annotations

import asyncio

import pytest

from tests.server.helpers import assert_complete_reply, heard_a_time, plain, recognise, speak, words
from tests.support.device import TestDevice
from tests.support.spoken import spoken_pcm

# (what the user says, words the server must recognise, words the spoken reply must contain)
QUESTIONS = [
    ("what time is it", {"what", "time"}, None),  # the time's words: heard_a_time
    ("what day is it", {"what", "day"}, {"today", "is"}),
    ("thank you very much", {"thank", "you"}, {"welcome"}),
]


@pytest.mark.parametrize("mode", ["manual", "auto"])
async def test_spoken_questions_get_spoken_answers_in_one_session(server, mode):
    async with TestDevice(server.ws_url) as dev:
        hello = await dev.connect()
        assert hello["transport"] == "websocket"
        assert hello["audio_params"] == {"format": "opus", "sample_rate": 24000, "channels": 1,
                                         "frame_duration": 60}
        for said, expected_stt, expected_reply in QUESTIONS:
            await speak(dev, said, mode)
            reply = await dev.next_reply(timeout=60)
            assert reply.stt is not None and expected_stt <= words(reply.stt), (said, reply.stt)
            assert_complete_reply(dev, reply)
            assert reply.emotions, "an llm emotion frame precedes the words"
            heard = recognise(*dev.decode_reply(reply))
            if expected_reply is None:
                assert heard_a_time(words(heard)), (reply.text, heard)
                continue
            assert expected_reply & words(reply.text), reply.text  # the words we meant to say…
            assert expected_reply <= words(heard), (reply.text, heard)  # …are the words one hears
        # Many turns, one connection, one session id on everything the server sent.
        ids = {m.get("session_id") for m in dev.json_messages() if m.get("type") != "mcp"}
        assert ids == {hello["session_id"]}


async def test_pcm_device_gets_pcm_downlink_at_its_own_rate(server):
    """The MicroPython firmware has no Opus: it announces pcm, and the reply is PCM at its rate."""
    async with TestDevice(server.ws_url, audio_format="pcm", sample_rate=16000, mcp=False) as dev:
        hello = await dev.connect()
        assert hello["audio_params"] == {"format": "pcm", "sample_rate": 16000, "channels": 1,
                                         "frame_duration": 60}
        await speak(dev, "what time is it", "manual")
        reply = await dev.next_reply(timeout=60)
        assert {"what", "time"} <= words(reply.stt or "")
        assert all(len(f.payload) == 16000 * 60 // 1000 * 2 for f in reply.frames)
        assert_complete_reply(dev, reply)
        assert heard_a_time(words(recognise(*dev.decode_reply(reply))))


@pytest.mark.parametrize("version", [2, 3])
async def test_binary_protocol_versions_2_and_3_carry_audio_both_ways(server, version):
    async with TestDevice(server.ws_url, protocol_version=version, mcp=False) as dev:
        await dev.connect()
        await speak(dev, "what day is it", "manual")
        reply = await dev.next_reply(timeout=60)  # the device unpacks every frame with its version
        assert {"what", "day"} <= words(reply.stt or "")
        assert_complete_reply(dev, reply)


async def test_typed_query_via_detect_is_answered_and_wake_word_only_arms_listening(server):
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.detect("hi wren")
        await dev.detect("what time is it")
        reply = await dev.next_reply(timeout=30)
        assert plain(reply.stt or "") == "what time is it"  # the wake word produced no turn of its own
        assert_complete_reply(dev, reply)
        assert sum(1 for m in dev.json_messages() if m.get("type") == "stt") == 1


async def test_device_tool_is_called_over_mcp_during_a_turn(server):
    async with TestDevice(server.ws_url) as dev:
        await dev.connect()
        await asyncio.wait_for(dev.mcp_ready.wait(), 15)
        await dev.detect("set the volume to 40")
        reply = await dev.next_reply(timeout=30)
        assert dev.tool_calls == [{"name": "self.audio_speaker.set_volume", "arguments": {"volume": 40}}]
        assert "40" in reply.text


async def test_realtime_speech_during_playback_barges_in_and_is_answered(server):
    async with TestDevice(server.ws_url) as dev:
        await dev.connect()
        await asyncio.wait_for(dev.mcp_ready.wait(), 15)
        await dev.listen_start("realtime")
        await speak(dev, "what can you do", "realtime", start=False)
        # The long capability answer starts; the user talks over it (the mic never stops in realtime).
        await dev.wait_json(lambda m: m.get("state") == "sentence_start", 60)
        await speak(dev, "what time is it", "realtime", start=False)
        first = await dev.next_reply(timeout=60)
        assert plain(first.stt or "") == "what can you do"
        assert first.audio_s < 10, "cut short by the barge-in (the full answer is ~18 s)"
        second = await dev.next_reply(timeout=60)
        assert {"what", "time"} <= words(second.stt or "")
        assert_complete_reply(dev, second)


async def test_manual_mode_never_answers_early_a_pause_while_held_keeps_one_utterance(server):
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.listen_start("manual")
        await dev.stream_pcm(spoken_pcm("what time is it"))
        await dev.stream_silence(1500)  # three times the auto-mode silence window, button still held
        assert not [m for m in dev.json_messages() if m.get("type") in ("stt", "tts")], "answered early"
        await dev.stream_pcm(spoken_pcm("thank you very much"))
        await dev.listen_stop()
        reply = await dev.next_reply(timeout=60)
        assert {"time", "very", "much"} <= words(reply.stt or ""), reply.stt  # both halves, one turn
        assert sum(1 for m in dev.json_messages() if m.get("type") == "stt") == 1


async def test_uplink_at_24khz_is_decoded_per_the_devices_audio_params(server):
    """Many boards' codecs run at 24 kHz: 60 ms is 1440 samples there, not 960."""
    async with TestDevice(server.ws_url, sample_rate=24000, mcp=False) as dev:
        await dev.connect()
        await speak(dev, "what day is it", "manual")
        reply = await dev.next_reply(timeout=60)
        assert {"what", "day"} <= words(reply.stt or ""), reply.stt


async def test_a_burst_of_audio_then_listen_stop_is_recognised_in_full(server):
    """A device that uploads faster than real time (a backlog after a network stall): the frames wait in
    the session's inbox and are handled in runs, and the `listen stop` right behind them still finalises
    only after every one of them, so no word is lost."""
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        await dev.listen_start("manual")
        await dev.stream_pcm(spoken_pcm("set the volume to thirty"), realtime=False)
        await dev.listen_stop()
        reply = await dev.next_reply(timeout=60)
        heard = words(reply.stt or "")  # the number as a word or as digits: both are every word heard
        assert {"set", "volume"} <= heard and heard & {"thirty", "30"}, reply.stt
        assert_complete_reply(dev, reply)
