"""The builtin engine understands a request however the recogniser wrote it, asks when unsure, and
stays responsive under hostile input."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.agent.fakes import DEVICE_STATUS, XIAOZHI_TOOLS, RecordingTools

LAMP_AND_MUSIC = [
    {"name": "self.lamp.turn_on", "description": "Turn on the lamp.", "inputSchema": {"type": "object"}},
    {"name": "self.lamp.turn_off", "description": "Turn off the lamp.", "inputSchema": {"type": "object"}},
    {"name": "music.play", "description": "Play the music.", "inputSchema": {"type": "object"}},
    {"name": "music.pause", "description": "Pause the music.", "inputSchema": {"type": "object"}},
]
DATE_REPLY = "Today is Wednesday, March 4, 2026."
TIME_REPLY = "It's 9:15 AM."


def device(status: str | Exception = DEVICE_STATUS, extra: list | None = None) -> RecordingTools:
    return RecordingTools(XIAOZHI_TOOLS + (extra or []), {"self.get_device_status": status})


async def say(agent, text: str, key: str = "test:tolerance", tools=None) -> str:
    return (await agent.process_direct(text, session_key=key, device_tools=tools)).content


@pytest.fixture
def clock(agent):
    agent.now = lambda: datetime(2026, 3, 4, 9, 15, tzinfo=UTC)
    return agent


# ---- numbers, spellings, punctuation ----------------------------------------------------------------------

async def test_spelled_and_digit_numbers_set_the_same_volume(agent):
    tools = device()
    for text in ("set the volume to 75", "Set the volume to seventy-five percent.",
                 "set the volume to seventy five", "SET THE VOLUME TO 75%!", "set the volum to seventy-five"):
        assert await say(agent, text, tools=tools) == "Done, the volume is now 75.", text
    assert tools.calls == [("self.audio_speaker.set_volume", {"volume": 75})] * 5


async def test_colour_and_color_both_set_the_light(agent):
    tools = device()
    assert (await say(agent, "set the colour of the light to red", tools=tools)).endswith("is now red.")
    assert (await say(agent, "Set the color of the light to gray.", tools=tools)).endswith("is now grey.")
    assert tools.calls == [("self.light.set_rgb", {"r": 255, "g": 0, "b": 0}),
                           ("self.light.set_rgb", {"r": 128, "g": 128, "b": 128})]


async def test_punctuation_and_contractions_do_not_hide_the_intent(clock):
    assert await say(clock, "What's the time?") == TIME_REPLY
    assert await say(clock, "Whats today's date!!") == DATE_REPLY


# ---- recogniser slips -----------------------------------------------------------------------------------

async def test_misheard_name_question_still_answers_the_name(agent):
    await say(agent, "my name is Ada")
    assert await say(agent, "what is my main") == "Your name is Ada."


async def test_misheard_date_request_still_tells_the_date(clock):
    assert await say(clock, "please tell me that they") == DATE_REPLY


async def test_unrelated_sentences_are_not_taken_for_a_fixed_intent(clock):
    for text in ("tell me a story", "what is that", "what is the weather", "what is my mane hair colour"):
        reply = await say(clock, text)
        assert "don't understand" in reply, (text, reply)


async def test_asking_the_assistant_its_name_is_not_the_users_name(agent):
    await say(agent, "my name is Ada")
    assert "Wren" in await say(agent, "what is your name")


async def test_turn_on_heard_as_on_on_still_turns_the_lamp_on(agent):
    tools = device(extra=LAMP_AND_MUSIC)
    await say(agent, "on on the lamp", tools=tools)
    await say(agent, "turn off the lamp", tools=tools)
    assert tools.calls == [("self.lamp.turn_on", {}), ("self.lamp.turn_off", {})]


async def test_a_switch_tool_is_not_called_without_its_direction(agent):
    tools = device(extra=LAMP_AND_MUSIC)
    await say(agent, "the lamp", tools=tools)
    assert tools.calls == []


async def test_pause_heard_as_cause_still_pauses(agent):
    tools = device(extra=LAMP_AND_MUSIC)
    await say(agent, "cause the music", tools=tools)
    assert tools.calls == [("music.pause", {})]


# ---- clarifying questions ---------------------------------------------------------------------------------

async def test_close_intents_get_a_clarifying_question_the_next_turn_answers(clock):
    assert await say(clock, "whats the dame") == "Did you mean the time or the date?"
    assert await say(clock, "the date") == DATE_REPLY
    assert await say(clock, "whats the dame") == "Did you mean the time or the date?"
    assert await say(clock, "the time please") == TIME_REPLY


async def test_a_misheard_answer_to_the_clarifying_question_still_resolves_it(clock):
    await say(clock, "whats the dame")
    assert await say(clock, "that they") == DATE_REPLY


async def test_a_clarifying_question_can_be_declined(clock):
    await say(clock, "whats the dame")
    assert await say(clock, "neither") == "Okay, never mind."
    assert "don't understand" in await say(clock, "the second one")  # nothing left pending


async def test_a_new_request_after_a_clarifying_question_is_just_answered(clock):
    tools = device()
    await say(clock, "whats the dame", tools=tools)
    assert await say(clock, "set the volume to 20", tools=tools) == "Done, the volume is now 20."
    assert "don't understand" in await say(clock, "the first one", tools=tools)  # the question expired


async def test_the_pending_clarifying_question_survives_a_restart(agent_factory, tmp_path: Path):
    data = tmp_path / "data"
    first = await agent_factory(data)
    await say(first, "whats the dame", key="xiaozhi:dev-1")
    await first.close()
    second = await agent_factory(data)
    second.now = lambda: datetime(2026, 3, 4, 9, 15, tzinfo=UTC)
    assert await say(second, "the time", key="xiaozhi:dev-1") == TIME_REPLY


# ---- relative changes -------------------------------------------------------------------------------------

async def test_louder_reads_the_volume_and_raises_it_by_twenty(agent):
    tools = device()
    assert await say(agent, "louder", tools=tools) == "Done, the volume is now 90."
    assert tools.calls == [("self.get_device_status", {}), ("self.audio_speaker.set_volume", {"volume": 90})]


@pytest.mark.parametrize(
    ("said", "tool", "value"),
    [
        ("a bit louder", "self.audio_speaker.set_volume", {"volume": 80}),
        ("turn it up", "self.audio_speaker.set_volume", {"volume": 90}),
        ("quieter", "self.audio_speaker.set_volume", {"volume": 50}),
        ("a bit quieter", "self.audio_speaker.set_volume", {"volume": 60}),
        ("turn the volume down", "self.audio_speaker.set_volume", {"volume": 50}),
        ("turn the volume up by five", "self.audio_speaker.set_volume", {"volume": 75}),
        ("brighter", "self.screen.set_brightness", {"brightness": 95}),
        ("dimmer", "self.screen.set_brightness", {"brightness": 55}),
        ("a little brighter", "self.screen.set_brightness", {"brightness": 85}),
    ],
)
async def test_relative_changes_step_from_the_current_value(agent, said, tool, value):
    tools = device()
    reply = await say(agent, said, tools=tools)
    assert tools.calls[-1] == (tool, value)
    assert reply == f"Done, the {next(iter(value))} is now {next(iter(value.values()))}."


async def test_turning_up_to_a_number_is_an_absolute_setting(agent):
    tools = device()
    await say(agent, "turn the volume up to ninety", tools=tools)
    assert tools.calls == [("self.audio_speaker.set_volume", {"volume": 90})]


async def test_a_relative_change_is_clamped_to_the_schema(agent):
    tools = device('{"audio_speaker": {"volume": 95}}')
    assert await say(agent, "louder", tools=tools) == "Done, the volume is now 100."
    tools = device('{"audio_speaker": {"volume": 100}}')
    assert await say(agent, "louder", tools=tools) == "The volume is already at the maximum, 100."
    assert tools.calls == [("self.get_device_status", {})]


async def test_without_a_readable_value_the_default_is_used_and_said(agent):
    tools = device(RuntimeError("status unavailable"))
    reply = await say(agent, "a bit louder", tools=tools)
    assert reply == "I couldn't read the current volume, so I set it to 60."
    assert tools.calls[-1] == ("self.audio_speaker.set_volume", {"volume": 60})


# ---- bounded work, off the event loop ---------------------------------------------------------------------

def _many_tools(count: int, properties: int) -> list[dict]:
    specs = list(XIAOZHI_TOOLS)
    for i in range(count):
        level = {"type": "integer", "minimum": 0, "maximum": 100}
        props = {f"setting_{i}_{j}": level for j in range(properties)}
        specs.append({
            "name": f"self.gadget_{i}.set_level",
            "description": " ".join(f"word{i}x{j}" for j in range(200)),
            "inputSchema": {"type": "object", "properties": props, "required": list(props)[:1]},
        })
    return specs


async def test_huge_query_with_many_tools_answers_quickly_without_blocking_the_loop(agent):
    tools = RecordingTools([*_many_tools(2000, 20), {
        "name": "self.huge.configure", "description": "Configure everything.",
        "inputSchema": {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}},
    }])
    filler = " ".join(f"zork{i} blimp{i % 97}" for i in range(6000))
    query = ("set the volume to seventy five " + filler)[:60_000]
    assert len(query) == 60_000
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            started = time.perf_counter()
            await asyncio.sleep(0.05)
            gaps.append(time.perf_counter() - started)

    ticking = asyncio.create_task(ticker())
    started = time.perf_counter()
    reply = await say(agent, query, tools=tools)
    reply_again = await say(agent, "\n\n".join([query[:3000]] * 40), tools=tools)
    elapsed = time.perf_counter() - started
    done.set()
    await ticking
    assert reply == "Done, the volume is now 75."
    assert reply_again.startswith("Done, the volume is now 75.")
    assert elapsed < 4.0
    assert len(gaps) >= 3 and max(gaps) < 0.5, gaps  # the loop kept ticking while the matcher worked
