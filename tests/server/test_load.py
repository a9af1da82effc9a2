"""Load: 20 devices at once, each speaking two overlapping turns; every turn answered in full."""

from __future__ import annotations

import asyncio

from tests.server.helpers import assert_complete_reply, plain
from tests.support.device import TestDevice
from tests.support.spoken import spoken_pcm

DEVICES = 20
SENTENCES = ["what time is it", "what day is it", "thank you very much"]


async def _two_overlapping_turns(url: str, index: int) -> list[tuple[str, str | None, str]]:
    first = SENTENCES[index % len(SENTENCES)]
    second = SENTENCES[(index + 1) % len(SENTENCES)]
    async with TestDevice(url, mcp=False) as dev:
        await dev.connect(timeout=30)
        # Turn two is spoken right after turn one, while turn one is still being answered.
        for said in (first, second):
            await dev.listen_start("manual")
            await dev.stream_pcm(spoken_pcm(said))
            await dev.listen_stop()
        results = []
        for said in (first, second):
            reply = await dev.next_reply(timeout=240)
            assert_complete_reply(dev, reply, timing=False)
            results.append((said, reply.stt, reply.text))
        return results


async def test_twenty_devices_two_overlapping_turns_each_every_turn_answered_in_full(server):
    for sentence in SENTENCES:
        spoken_pcm(sentence)  # synthesise the inputs before the clock starts
    outcomes = await asyncio.gather(*(_two_overlapping_turns(server.ws_url, i) for i in range(DEVICES)))
    turns = [turn for device in outcomes for turn in device]
    assert len(turns) == 2 * DEVICES
    wrong = [(said, heard) for said, heard, _ in turns if plain(heard or "") != said]
    assert wrong == [], f"{len(wrong)} of {len(turns)} turns not recognised in full"
    assert all(text for _, _, text in turns)
