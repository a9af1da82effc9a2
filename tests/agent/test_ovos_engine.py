"""The OVOS engine against a REAL `ovos-messagebus` process and a small scripted responder on the bus.

The responder plays OVOS core + skills: it answers `recognizer_loop:utterance` with `speak` replies and
`ovos.utterance.handled`, built with ovos-bus-client's own `Message.reply` (so the session context is
carried exactly as OVOS carries it), scripted by the utterance text.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from ovos_bus_client.message import Message
from wren.agent.engines.ovos import APOLOGY_DOWN, APOLOGY_SILENT, LISTENER_QUEUE_SIZE
from wren.agent.event_stream import EVENT_QUEUE_SIZE
from wren.agent.events import TextChunk
from wren.agent.messages import InboundMessage

from tests.support.processes import free_port, stop, wait_for_port

VENV_BIN = Path(__file__).resolve().parents[2] / ".venv" / "bin"
FLOOD = EVENT_QUEUE_SIZE + LISTENER_QUEUE_SIZE + 100  # more than a turn that is not read can buffer


@pytest.fixture(scope="module")
def bus_url(tmp_path_factory) -> Any:
    """A real ovos-messagebus on a free loopback port, isolated by a temp XDG config."""
    root = tmp_path_factory.mktemp("ovos")
    port = free_port()
    env = dict(os.environ)
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        env[name] = str(root / name.lower())
        Path(env[name]).mkdir()
    (root / "xdg_config_home" / "mycroft").mkdir()
    (root / "xdg_config_home" / "mycroft" / "mycroft.conf").write_text(
        json.dumps({"websocket": {"host": "127.0.0.1", "port": port}})
    )
    proc = subprocess.Popen([str(VENV_BIN / "ovos-messagebus")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield f"ws://127.0.0.1:{port}/core"
    finally:
        stop(proc)


class Responder:
    """Scripted OVOS core/skills connected to the bus; every utterance it saw is recorded."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.utterances: list[dict[str, Any]] = []
        self.release = asyncio.Event()
        self.flooded = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._http = aiohttp.ClientSession()
        self.ws = await self._http.ws_connect(self.url)
        self._reader = asyncio.create_task(self._read())

    async def stop(self) -> None:
        for task in [*self._tasks, self._reader]:
            task.cancel()
        await asyncio.gather(*self._tasks, self._reader, return_exceptions=True)
        await self.ws.close()
        await self._http.close()

    async def _read(self) -> None:
        async for frame in self.ws:
            message = Message.deserialize(frame.data)
            if message.msg_type == "recognizer_loop:utterance":
                self.utterances.append(json.loads(frame.data))
                task = asyncio.create_task(self._answer(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _emit(self, message: Message) -> None:
        await self.ws.send_str(message.serialize())

    async def _speak(self, request: Message, text: str) -> None:
        await self._emit(request.reply("speak", {"utterance": text, "lang": "en-US", "expect_response": False,
                                                 "meta": {"skill": "test.responder"}}))

    async def _answer(self, request: Message) -> None:
        text = request.data["utterances"][0]
        if text == "tell me two things":
            await self._speak(request, "First thing.")
            await self._speak(request, "Second thing.")
        elif text == "count":
            # A skill keeping state in the session: it only knows what the session it receives says.
            session = request.context["session"]
            count = int(session.get("test_counter", 0)) + 1
            reply_session = dict(session, test_counter=count,
                                 active_skills=[["test.counter", time.time()]])
            reply = request.reply("speak", {"utterance": f"Count is {count}."})
            reply.context["session"] = reply_session
            await self._emit(reply)
            done = request.reply("ovos.utterance.handled", {})
            done.context["session"] = reply_session
            await self._emit(done)
            return
        elif text == "ramble":
            await self._speak(request, "I keep going.")
            await self._speak(request, "And never say I'm done.")
            return  # no handled
        elif text == "silence":
            return
        elif text == "slow":
            for sentence in ("One.", "Two.", "Three."):
                await self._speak(request, sentence)
                await asyncio.sleep(0.6)
        elif text == "chatter":
            n = 0
            while True:
                n += 1
                await self._speak(request, f"Sentence {n}.")
                await asyncio.sleep(0.3)
        elif text == "wait for me":
            await self._speak(request, "Before.")
            await self.release.wait()
            await self._speak(request, "After.")
        elif text == "flood":
            for n in range(1, FLOOD + 1):
                await self._speak(request, f"Flood {n}.")
            self.flooded.set()
        elif text == "lost":
            await self._emit(Message("speak", {"utterance": "Nobody hears this."}, {}))
        else:
            await self._speak(request, f"You said {text}.")
        await self._emit(request.reply("ovos.utterance.handled", {}))


@pytest.fixture
async def responder(bus_url):
    r = Responder(bus_url)
    await r.start()
    yield r
    await r.stop()


@pytest.fixture
async def ovos_agent(agent_factory, bus_url):
    return await agent_factory(engine="ovos", ovos_url=bus_url, ovos_timeout_s=1.0, ovos_max_turn_s=2.5)


async def chunks(agent, text: str, device: str = "dev-1") -> list[str]:
    turn = agent.begin_turn(InboundMessage("xiaozhi", device, device, text))
    return [e.text async for e in turn if isinstance(e, TextChunk)]


async def test_multi_speak_turn_streams_every_sentence(ovos_agent, responder):
    reply = await asyncio.wait_for(chunks(ovos_agent, "tell me two things"), 10)
    assert reply == ["First thing.", " Second thing."]
    sent = responder.utterances[0]
    assert sent["data"] == {"utterances": ["tell me two things"], "lang": "en-US"}
    assert sent["context"]["source"] == "wren"
    assert sent["context"]["session"]["session_id"].startswith("wren-")


async def test_each_session_key_has_its_own_ovos_session_and_never_default(ovos_agent, responder):
    await chunks(ovos_agent, "hello", "dev-1")
    await chunks(ovos_agent, "hello", "dev-1")
    await chunks(ovos_agent, "hello", "dev-2")
    ids = [u["context"]["session"]["session_id"] for u in responder.utterances]
    assert ids[0] == ids[1] != ids[2]
    assert "default" not in ids


async def test_skill_session_state_survives_turns_and_restarts(agent_factory, bus_url, responder, tmp_path):
    data = tmp_path / "ovos-data"
    options = {"engine": "ovos", "ovos_url": bus_url, "ovos_timeout_s": 1.0, "ovos_max_turn_s": 2.5}
    first = await agent_factory(data, **options)
    assert await chunks(first, "count") == ["Count is 1."]
    assert await chunks(first, "count") == ["Count is 2."]
    assert "test.counter" in responder.utterances[1]["context"]["session"]["active_skills"][0]
    await first.close()
    second = await agent_factory(data, **options)
    assert await chunks(second, "count") == ["Count is 3."]
    assert await chunks(second, "count", device="dev-other") == ["Count is 1."]


async def test_a_responder_that_never_sends_handled_ends_after_the_idle_timeout(ovos_agent, responder):
    reply = await asyncio.wait_for(chunks(ovos_agent, "ramble"), 10)
    assert reply == ["I keep going.", " And never say I'm done."]


async def test_slow_sentences_keep_the_turn_alive(ovos_agent, responder):
    assert await asyncio.wait_for(chunks(ovos_agent, "slow"), 10) == ["One.", " Two.", " Three."]


async def test_endless_chatter_is_cut_by_the_overall_deadline(ovos_agent, responder):
    reply = await asyncio.wait_for(chunks(ovos_agent, "chatter"), 10)
    assert 3 <= len(reply) <= 12 and reply[0] == "Sentence 1."


async def test_silence_and_lost_session_replies_give_an_honest_answer(ovos_agent, responder):
    assert await asyncio.wait_for(chunks(ovos_agent, "silence"), 10) == [APOLOGY_SILENT]
    assert await asyncio.wait_for(chunks(ovos_agent, "lost"), 10) == [APOLOGY_SILENT]


async def test_the_first_sentence_arrives_before_the_turn_is_handled(ovos_agent, responder):
    turn = ovos_agent.begin_turn(InboundMessage("xiaozhi", "dev-1", "dev-1", "wait for me"))
    seen: list[str] = []

    async def consume() -> None:
        async for event in turn:
            if isinstance(event, TextChunk):
                seen.append(event.text)
                if event.text == "Before.":
                    responder.release.set()  # only now may the skill finish

    await asyncio.wait_for(consume(), 10)
    assert seen == ["Before.", " After."]


async def test_concurrent_sessions_do_not_cross_talk(ovos_agent, responder):
    results = await asyncio.wait_for(asyncio.gather(
        chunks(ovos_agent, "alpha", "dev-a"),
        chunks(ovos_agent, "beta", "dev-b"),
        chunks(ovos_agent, "gamma", "dev-c"),
    ), 10)
    assert results == [["You said alpha."], ["You said beta."], ["You said gamma."]]


async def test_bus_down_gives_a_spoken_apology(agent_factory):
    down = f"ws://127.0.0.1:{free_port()}/core"
    agent = await agent_factory(engine="ovos", ovos_url=down, ovos_timeout_s=1.0)
    assert await asyncio.wait_for(chunks(agent, "hello"), 10) == [APOLOGY_DOWN]


async def test_a_flood_for_a_turn_that_is_not_read_stays_bounded_and_the_turn_still_ends(
    agent_factory, bus_url, responder
):
    agent = await agent_factory(engine="ovos", ovos_url=bus_url, ovos_timeout_s=1.0, ovos_max_turn_s=20.0)
    turn = agent.begin_turn(InboundMessage("xiaozhi", "dev-1", "dev-1", "flood"))
    await asyncio.wait_for(responder.flooded.wait(), 10)
    # The bus keeps one sender's order: once this reply is in, the whole flood reached Wren's reader.
    assert await asyncio.wait_for(chunks(agent, "hello", "dev-2"), 10) == ["You said hello."]
    reply = await asyncio.wait_for(_texts(turn), 10)  # "handled" was dropped: the idle timeout ends it
    assert reply == [("" if n == 1 else " ") + f"Flood {n}." for n in range(1, len(reply) + 1)]
    assert EVENT_QUEUE_SIZE <= len(reply) <= EVENT_QUEUE_SIZE + LISTENER_QUEUE_SIZE + 1 < FLOOD


async def _texts(turn) -> list[str]:
    return [e.text async for e in turn if isinstance(e, TextChunk)]
