"""Background work (the phrase cache's warm-up) asks the server whether a person is in a turn: true from
push-to-talk held or speech heard until the reply has played, false for a device listening to a quiet
room. Against the real server."""

from __future__ import annotations

import asyncio
from typing import Any

from wren.session import listening

from tests.server.helpers import session_of, speak, until
from tests.support.device import TestDevice


async def test_a_device_is_in_a_turn_from_the_button_to_the_end_of_its_reply_and_not_in_a_quiet_room(
    server, monkeypatch,
):
    any_turn = server.server._any_turn
    while_words_come: list[bool] = []  # any_turn() as the listener waits for the recogniser's last words
    settle = listening._with_words

    async def spy(frames: list[Any]) -> list[Any]:
        while_words_come.append(any_turn())
        return await settle(frames)

    monkeypatch.setattr(listening, "_with_words", spy)
    async with TestDevice(server.ws_url, mcp=False) as dev:
        await dev.connect()
        session = session_of(server, dev)
        assert not any_turn()

        await dev.listen_start("auto")
        await dev.stream_silence(900)
        await asyncio.sleep(0.2)
        assert session.listener.active and not session.in_turn and not any_turn()

        await dev.listen_start("manual")  # the button: someone is about to speak
        await until(lambda: session.in_turn, 5, "push-to-talk held counts as a turn")
        samples: list[bool] = []
        watching = asyncio.create_task(_watch(any_turn, samples))
        await speak(dev, "what time is it", "manual", start=False)
        reply = await dev.next_reply(timeout=30)  # returns at its `tts stop`
        watching.cancel()
        assert reply.frames
        over = samples.index(False) if False in samples else len(samples)
        # never a gap (not while the last words are decoded, not before the reply starts): the turn is
        # over only at its end (the server may finish its `tts stop` a moment before the device reads it)
        assert over > 100 and not any(samples[over:])
        assert while_words_come and all(while_words_come)  # sampling alone could miss this short moment
        await until(lambda: not any_turn(), 10, "the turn is over once its reply has played")


async def _watch(any_turn: Any, samples: list[bool]) -> None:
    while True:  # what the warm-up's thread would see, every few milliseconds
        samples.append(any_turn())
        await asyncio.sleep(0.005)
