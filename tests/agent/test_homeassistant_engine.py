"""The Home Assistant engine against a local server speaking HA's documented conversation API
(tests/agent/ha_server.py; HA itself cannot run here)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import pytest
from wren.agent.engines import make_engine
from wren.agent.engines.homeassistant import (
    APOLOGY_AUTH,
    APOLOGY_DOWN,
    APOLOGY_ERROR,
    APOLOGY_SILENT,
    APOLOGY_SLOW,
)
from wren.agent.events import TextChunk
from wren.agent.messages import InboundMessage
from wren.config import Config, ConfigError, load_config

from tests.agent.ha_server import TOKEN, FakeHomeAssistant
from tests.support.processes import free_port

VENV_BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"


@pytest.fixture
async def ha():
    server = FakeHomeAssistant()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def ha_options(ha: FakeHomeAssistant, **extra: object) -> dict[str, object]:
    return {"engine": "homeassistant", "ha_url": ha.url, "ha_token": TOKEN, "ha_language": "en",
            "ha_timeout_s": 2.0, **extra}


@pytest.fixture
async def ha_agent(agent_factory, ha):
    return await agent_factory(**ha_options(ha))


async def chunks(agent, text: str, device: str = "dev-1") -> list[str]:
    turn = agent.begin_turn(InboundMessage("xiaozhi", device, device, text))
    return [e.text async for e in turn if isinstance(e, TextChunk)]


async def test_home_assistants_speech_is_the_reply_and_is_kept_in_history(ha_agent, ha):
    assert await asyncio.wait_for(chunks(ha_agent, "turn on the kitchen light"), 10) == [
        "Turned on the kitchen light."
    ]
    history, state = await ha_agent.store.load("xiaozhi:dev-1", "homeassistant")
    assert [(r.role, r.content) for r in history] == [
        ("user", "turn on the kitchen light"), ("assistant", "Turned on the kitchen light.")
    ]
    assert state["conversation_id"] in ha.conversations


async def test_the_request_carries_the_bearer_token_the_language_and_the_agent_id(agent_factory, ha):
    agent = await agent_factory(**ha_options(ha, ha_agent_id="conversation.home_assistant"))
    await chunks(agent, "turn on the hall light")
    sent = ha.requests[0]
    assert sent["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert sent["body"] == {"text": "turn on the hall light", "language": "en",
                            "agent_id": "conversation.home_assistant"}  # no conversation_id on a first turn


async def test_without_a_language_or_agent_id_home_assistant_uses_its_own_defaults(agent_factory, ha):
    agent = await agent_factory(**ha_options(ha, ha_language=""))
    await chunks(agent, "turn on the hall light")
    assert ha.bodies == [{"text": "turn on the hall light"}]


async def test_the_conversation_id_goes_back_on_the_next_turn_of_the_same_session(ha_agent, ha):
    await chunks(ha_agent, "turn on the porch light")
    assert await chunks(ha_agent, "what did i just ask") == ["You asked: turn on the porch light."]
    first, second = ha.bodies
    assert "conversation_id" not in first
    assert second["conversation_id"] in ha.conversations and len(ha.conversations) == 1


async def test_two_sessions_are_two_home_assistant_conversations(ha_agent, ha):
    await chunks(ha_agent, "turn on the porch light", "dev-a")
    await chunks(ha_agent, "turn on the attic light", "dev-b")
    assert await asyncio.gather(chunks(ha_agent, "what did i just ask", "dev-a"),
                                chunks(ha_agent, "what did i just ask", "dev-b")) == [
        ["You asked: turn on the porch light."], ["You asked: turn on the attic light."]
    ]
    ids = [b.get("conversation_id") for b in ha.bodies]
    assert ids[0] is ids[1] is None and ids[2] != ids[3] and len(ha.conversations) == 2


async def test_the_conversation_id_survives_a_wren_restart(agent_factory, ha, tmp_path):
    data = tmp_path / "ha-data"
    first = await agent_factory(data, **ha_options(ha))
    await chunks(first, "turn on the porch light")
    await first.close()
    second = await agent_factory(data, **ha_options(ha))
    assert await chunks(second, "what did i just ask") == ["You asked: turn on the porch light."]


async def test_a_conversation_home_assistant_forgot_is_followed_to_its_new_id(ha_agent, ha):
    await chunks(ha_agent, "turn on the porch light")
    old = next(iter(ha.conversations))
    ha.forget()
    assert await chunks(ha_agent, "what did i just ask") == ["You have not asked anything yet."]
    new = next(iter(ha.conversations))
    await chunks(ha_agent, "what did i just ask")
    assert [b.get("conversation_id") for b in ha.bodies] == [None, old, new] and old != new


async def test_home_assistants_own_error_answer_is_spoken(ha_agent, ha):
    assert await chunks(ha_agent, "frobnicate the garden") == ["Sorry, I couldn't understand that"]


async def test_a_question_back_from_home_assistant_is_spoken_and_its_answer_continues_the_conversation(
    ha_agent, ha
):
    assert await chunks(ha_agent, "set the temperature") == ["To what temperature?"]
    await chunks(ha_agent, "twenty one")
    assert ha.bodies[1]["conversation_id"] == next(iter(ha.conversations))


async def test_a_wrong_token_is_a_logged_error_and_a_spoken_apology(agent_factory, ha, caplog):
    agent = await agent_factory(**ha_options(ha, ha_token="not-the-token"))
    with caplog.at_level(logging.WARNING, logger="wren.agent.engines.homeassistant"):
        assert await chunks(agent, "turn on the kitchen light") == [APOLOGY_AUTH]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "refused the access token (HTTP 401)" in errors[0].getMessage()
    assert "not-the-token" not in caplog.text
    _, state = await agent.store.load("xiaozhi:dev-1", "homeassistant")
    assert "conversation_id" not in state


async def test_home_assistant_down_ends_the_turn_with_an_apology(agent_factory, caplog):
    agent = await agent_factory(engine="homeassistant", ha_url=f"http://127.0.0.1:{free_port()}",
                                ha_token=TOKEN, ha_timeout_s=2.0)
    with caplog.at_level(logging.WARNING, logger="wren.agent.engines.homeassistant"):
        assert await asyncio.wait_for(chunks(agent, "turn on the kitchen light"), 10) == [APOLOGY_DOWN]
    assert "unreachable" in caplog.text


async def test_a_slow_home_assistant_is_cut_at_the_timeout_and_the_session_goes_on(agent_factory, ha):
    agent = await agent_factory(**ha_options(ha, ha_timeout_s=0.5))
    started = time.monotonic()
    assert await asyncio.wait_for(chunks(agent, "slow"), 10) == [APOLOGY_SLOW]
    assert time.monotonic() - started < 2.0
    assert await chunks(agent, "turn on the kitchen light") == ["Turned on the kitchen light."]


@pytest.mark.parametrize(("text", "apology"), [
    ("broken", APOLOGY_ERROR), ("not json", APOLOGY_ERROR), ("say nothing", APOLOGY_SILENT),
])
async def test_http_errors_and_answers_without_speech_are_apologies(ha_agent, ha, text, apology):
    assert await chunks(ha_agent, text) == [apology]


@pytest.mark.parametrize(("options", "problem"), [
    ({"ha_token": TOKEN}, "needs agent.ha_url"),
    ({"ha_url": "http://127.0.0.1:8123"}, "needs agent.ha_token"),
    ({"ha_url": "homeassistant.local:8123", "ha_token": TOKEN}, "http:// or https://"),
    ({"ha_url": "http://127.0.0.1:8123", "ha_token": TOKEN, "ha_timeout_s": 0.0}, "ha_timeout_s"),
])
def test_a_missing_url_or_token_is_a_config_error_naming_the_option(options, problem):
    config = Config()
    config.agent.engine = "homeassistant"
    for key, value in options.items():
        setattr(config.agent, key, value)
    with pytest.raises(ConfigError, match=problem):
        make_engine(config)


def test_the_token_may_come_from_the_environment(tmp_path):
    config = load_config(env={"WREN_AGENT_ENGINE": "HomeAssistant", "WREN_AGENT_HA_URL": "http://ha:8123/",
                              "WREN_AGENT_HA_TOKEN": "secret-token", "WREN_DATA_DIR": str(tmp_path)})
    engine = make_engine(config)
    assert (engine.name, engine.url, engine.token) == (
        "homeassistant", "http://ha:8123/api/conversation/process", "secret-token")


def _chat_env(tmp_path: Path, **agent: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WREN_")}
    env.update({"WREN_DATA_DIR": str(tmp_path / "chat-data"), "WREN_AGENT_ENGINE": "homeassistant"})
    env.update({f"WREN_AGENT_{k.upper()}": v for k, v in agent.items()})
    return env


async def _wren_chat(env: dict[str, str], message: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(VENV_BIN / "wren"), "chat", "-m", message, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return int(proc.returncode or 0), out.decode(), err.decode()


async def test_wren_chat_without_a_token_stops_with_one_line_and_exit_2(tmp_path):
    code, out, err = await _wren_chat(_chat_env(tmp_path, ha_url="http://127.0.0.1:8123"), "hello")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "wren chat: agent.engine = homeassistant needs agent.ha_token (a long-lived access token; "
        "WREN_AGENT_HA_TOKEN)"
    ]


async def test_wren_chat_is_answered_by_home_assistant(tmp_path, ha):
    env = _chat_env(tmp_path, ha_url=ha.url, ha_token=TOKEN)
    code, out, err = await _wren_chat(env, "turn on the kitchen light")
    assert (code, out.strip()) == (0, "Turned on the kitchen light."), err
    assert ha.requests[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"
