from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from wren.agent.events import Emotion, TextChunk
from wren.agent.loop import AgentLoop
from wren.agent.messages import InboundMessage
from wren.tools.spec import ToolError

from tests.agent.conftest import make_config
from tests.agent.fakes import DEVICE_STATUS, XIAOZHI_TOOLS, RecordingTools
from tests.tools.device_responder import builtin_tools


async def say(agent, text: str, key: str = "test:one", tools=None) -> str:
    return (await agent.process_direct(text, session_key=key, device_tools=tools)).content


async def test_greets(agent):
    assert "hello" in (await say(agent, "hello there")).lower()


async def test_tells_the_time_from_the_clock(agent):
    agent.now = lambda: datetime(2026, 3, 4, 15, 7, tzinfo=UTC)
    assert await say(agent, "what time is it") == "It's 3:07 PM."


async def test_tells_the_date(agent):
    agent.now = lambda: datetime(2026, 3, 4, 9, 0, tzinfo=UTC)
    assert await say(agent, "what's the date today") == "Today is Wednesday, March 4, 2026."


async def test_time_uses_the_configured_timezone_offset(tmp_path):
    config = make_config(tmp_path / "data")
    config.server.timezone_offset_minutes = 300
    assert AgentLoop.from_config(config).now().utcoffset() == timedelta(hours=5)


async def test_says_honestly_when_it_does_not_understand(agent):
    reply = await say(agent, "blorp the quux sideways")
    assert "don't understand" in reply


async def test_what_can_you_do_lists_the_available_tools(agent):
    without = await say(agent, "what can you do")
    assert "time" in without and "volume" not in without
    with_tools = await say(agent, "what can you do", tools=RecordingTools(XIAOZHI_TOOLS))
    assert "set the volume of the audio speaker" in with_tools
    assert "set the brightness of the screen" in with_tools


async def test_set_the_volume_to_thirty_calls_the_device_tool(agent):
    tools = RecordingTools(XIAOZHI_TOOLS)
    reply = await say(agent, "set the volume to thirty", tools=tools)
    assert tools.calls == [("self.audio_speaker.set_volume", {"volume": 30})]
    assert reply == "Done, the volume is now 30."


async def test_asr_slips_and_compound_numbers_are_absorbed(agent):
    tools = RecordingTools(XIAOZHI_TOOLS)
    await say(agent, "set the volum to thirdy five", tools=tools)
    await say(agent, "please make the volume one hundred", tools=tools)
    await say(agent, "turn the brightness to 20%", tools=tools)
    await say(agent, "set the volume two thirty", tools=tools)  # "to" heard as "two"
    assert tools.calls == [
        ("self.audio_speaker.set_volume", {"volume": 35}),
        ("self.audio_speaker.set_volume", {"volume": 100}),
        ("self.screen.set_brightness", {"brightness": 20}),
        ("self.audio_speaker.set_volume", {"volume": 30}),
    ]


async def test_out_of_range_numbers_are_clamped_to_the_schema(agent):
    tools = RecordingTools(XIAOZHI_TOOLS)
    await say(agent, "set the volume to two hundred", tools=tools)
    assert tools.calls == [("self.audio_speaker.set_volume", {"volume": 100})]


async def test_turn_the_light_red_sets_rgb(agent):
    tools = RecordingTools(XIAOZHI_TOOLS)
    reply = await say(agent, "turn the light red", tools=tools)
    assert tools.calls == [("self.light.set_rgb", {"r": 255, "g": 0, "b": 0})]
    assert "red" in reply


async def test_device_status_question_is_answered_from_the_status_tool(agent):
    tools = RecordingTools(XIAOZHI_TOOLS, {"self.get_device_status": DEVICE_STATUS})
    reply = await say(agent, "what is the battery level", tools=tools)
    assert tools.calls == [("self.get_device_status", {})]
    assert "battery level 80" in reply
    assert "volume" not in reply  # focused on what was asked


async def test_a_setter_without_a_value_is_not_called(agent):
    tools = RecordingTools(XIAOZHI_TOOLS)
    await say(agent, "set the volume", tools=tools)
    assert all(name != "self.audio_speaker.set_volume" for name, _ in tools.calls)


async def test_tool_error_is_spoken(agent):
    tools = RecordingTools(XIAOZHI_TOOLS, {"self.audio_speaker.set_volume": ToolError("Speaker is busy")})
    reply = await say(agent, "set the volume to 40", tools=tools)
    assert "didn't work" in reply and "Speaker is busy" in reply


async def test_generic_server_tool_is_matched_by_its_description(agent):
    tools = RecordingTools([{
        "name": "weather_forecast",
        "description": "Get the weather forecast for a city.",
        "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }], {"weather_forecast": "Sunny and 21 degrees in Paris."})
    reply = await say(agent, "what is the weather forecast for paris", tools=tools)
    assert tools.calls == [("weather_forecast", {"city": "paris"})]
    assert reply == "Sunny and 21 degrees in Paris."


async def test_voice_turn_yields_emotion_and_text_events(agent):
    turn = agent.begin_turn(InboundMessage("xiaozhi", "dev", "dev-1", "hello"))
    events = [e async for e in turn]
    assert isinstance(events[0], Emotion)
    assert any(isinstance(e, TextChunk) and re.search("hello", e.text, re.I) for e in events)


async def test_render_prompt_grades_by_count(agent):
    first = agent.render_prompt("xiaozhi:dev-1", "silence", 1)
    third = agent.render_prompt("xiaozhi:dev-1", "silence", 3)
    assert first and third and first != third
    assert agent.render_prompt("xiaozhi:dev-1", "manual", 1) != first


async def test_documented_string_choices_pick_the_tool_and_the_value(agent):
    tools = RecordingTools(builtin_tools())
    assert await say(agent, "switch to dark mode", tools=tools) == "Done, the theme is now dark."
    assert tools.calls == [("self.screen.set_theme", {"theme": "dark"})]


async def test_an_optional_number_is_left_to_its_default_unless_named(agent):
    tools = RecordingTools(builtin_tools())
    await say(agent, "move the head to ninety degrees", tools=tools)
    await say(agent, "move the tail to ten with speed twenty", tools=tools)
    assert tools.calls == [("self.head.move", {"angle": 90}), ("self.tail.move", {"angle": 10, "speed": 20})]
