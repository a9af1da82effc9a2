"""The command grammar says only what the built-in engine understands: a recogniser constrained to it must
never turn speech into a sentence the engine then answers with "I don't understand"."""

from __future__ import annotations

import re

import pytest
from wren.agent.commands import BUILTIN_TEMPLATES, tool_templates
from wren.agent.vocabulary import recognition_phrases
from wren.speech.asr.grammar import is_template, parse, samples
from wren.tools.spec import ToolSpec

from tests.agent.fakes import DEVICE_STATUS, XIAOZHI_TOOLS, RecordingTools

NOT_UNDERSTOOD = re.compile(r"don't understand|didn't catch", re.IGNORECASE)
TOOLS = [ToolSpec.from_mcp(spec, "device") for spec in XIAOZHI_TOOLS]


def test_every_builtin_template_parses() -> None:
    for template in BUILTIN_TEMPLATES:
        parse(template)


@pytest.mark.parametrize("template", [*BUILTIN_TEMPLATES, *tool_templates(TOOLS)])
async def test_the_engine_understands_every_sentence_a_template_allows(agent, template: str) -> None:
    for number, sentence in enumerate(samples(template, 10, seed=len(template))):
        tools = RecordingTools(XIAOZHI_TOOLS, {"self.get_device_status": DEVICE_STATUS})
        reply = await agent.process_direct(sentence, session_key=f"test:grammar:{number}", device_tools=tools)
        assert not NOT_UNDERSTOOD.search(reply.content), (sentence, reply.content)


def test_device_tools_add_commands_from_their_schemas() -> None:
    templates = tool_templates(TOOLS)
    assert "[please] (set | change | turn) the volume to {number} [percent] [please]" in templates
    assert any("get device status" in t for t in templates)


def test_a_device_cannot_inject_template_syntax() -> None:
    hostile = ToolSpec.from_mcp({
        "name": "self.x(|[{any}", "description": "",
        "inputSchema": {"type": "object",
                        "properties": {"mode": {"type": "string", "enum": ["a|b)", "{any}"]}}},
    }, "device")
    for template in tool_templates([hostile]):
        parse(template)
        assert "{any}" not in template


def test_the_session_phrase_set_carries_the_commands_after_the_words() -> None:
    phrases = recognition_phrases(TOOLS, ["Siobhan"])
    assert phrases[0] == "Siobhan"
    templates = [p for p in phrases if is_template(p)]
    assert len(templates) >= len(BUILTIN_TEMPLATES)
