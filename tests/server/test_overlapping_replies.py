"""Two devices at once on a real server: one device's long reply does not hold back another's first words.

Synthesis of every session goes through the server's one TTS scheduler (wren.pipeline.tts_scheduler),
whose trace says which job ran when; the order is asserted from it, not from wall-clock thresholds.
"""

from __future__ import annotations

import asyncio

from wren.pipeline.tts_scheduler import RELEASE_AHEAD_S

from tests.server.helpers import assert_complete_reply
from tests.support.device import TestDevice


def _is_audio(r) -> bool:
    return r.kind == "audio"


async def test_a_second_device_is_answered_before_the_first_devices_later_sentences_are_synthesised(server):
    scheduler = server.server.tts_scheduler

    async def snapshot() -> list:
        return list(scheduler.trace)

    async with TestDevice(server.ws_url) as a, TestDevice(server.ws_url) as b:
        await asyncio.gather(a.connect(), b.connect())
        await asyncio.wait_for(asyncio.gather(a.mcp_ready.wait(), b.mcp_ready.wait()), 15)
        await a.detect("what can you do")  # a long answer: nine sentences, about 18 s of speech
        await a.wait_for(_is_audio, 30)
        await asyncio.sleep(1.0)  # A's reply is playing
        await b.detect("what time is it")
        reply_b = await b.next_reply(timeout=30)
        reply_a = await a.next_reply(timeout=60)
        assert_complete_reply(a, reply_a)
        assert_complete_reply(b, reply_b)
        assert len(reply_a.sentences) >= 5
    trace = server.call(snapshot())
    of_a = [job for job in trace if job.turn.startswith(f"{a.device_id}:")]
    of_b = [job for job in trace if job.turn.startswith(f"{b.device_id}:")]
    b_first = of_b[0]
    assert b_first.chunk == 0 and abs(b_first.deadline - b_first.submitted) < 0.01  # first words: due now
    # Earliest deadline first: nothing less urgent started while B's first words waited for a worker.
    overtook = [job for job in trace if b_first.submitted <= job.started < b_first.started]
    assert all(job.deadline <= b_first.deadline for job in overtook), overtook
    # Just in time: A's later sentences were not synthesised all at once ahead of B ...
    after_b = [job for job in of_a if job.started > b_first.started]
    assert len(after_b) >= len(of_a) // 2, [(j.chunk, j.started - b_first.started) for j in of_a]
    # ... and none of A's jobs started before its release (deadline − RELEASE_AHEAD_S, or at submission).
    early = [job for job in of_a if job.started < min(job.submitted, job.deadline - RELEASE_AHEAD_S) - 1e-6]
    assert early == []
