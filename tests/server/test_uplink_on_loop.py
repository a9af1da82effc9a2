"""Where the uplink's frame work runs: on the event loop when the recogniser's feed never blocks (Moonshine),
on the listen threads otherwise or when `[server] uplink_on_loop` is off; spoken turns work both ways."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from wren.app import uplink_on_loop
from wren.config import Config

from tests.server.helpers import assert_complete_reply, speak, words
from tests.support.device import TestDevice
from tests.support.spoken import spoken_pcm


def _config(on: bool) -> Config:
    config = Config()
    config.server.uplink_on_loop = on
    return config


def test_only_a_recogniser_whose_feed_never_blocks_is_fed_on_the_loop():
    moonshine_like = SimpleNamespace(asr=SimpleNamespace(feeds_without_blocking=True))
    streaming = SimpleNamespace(asr=SimpleNamespace(name="pocketsphinx"))  # a worker's finish() waits
    assert uplink_on_loop(_config(True), moonshine_like)
    assert not uplink_on_loop(_config(False), moonshine_like)
    assert not uplink_on_loop(_config(True), streaming)


def test_the_default_recogniser_is_fed_on_the_loop(speech):
    assert speech.asr.name == "moonshine"
    assert uplink_on_loop(Config(), speech)


def _uplink_threads(server) -> set[str]:
    """The threads the session's uplink jobs ran on, recorded around the listen executor's `_run`."""
    executor = server.server.listen_executor
    seen: set[str] = set()
    run = executor._run

    def recording(jobs):  # type: ignore[no-untyped-def]
        if jobs[0][5] is not None:  # a `submit_together` call: the frames' work
            seen.add(threading.current_thread().name)
        return run(jobs)

    executor._run = recording
    return seen


@pytest.mark.parametrize("on_loop", [True, False])
async def test_a_spoken_turn_is_answered_with_the_uplink_on_the_loop_or_on_the_threads(start_server, on_loop):
    server = start_server(server={"uplink_on_loop": on_loop})
    assert server.server.listen_executor.on_loop is on_loop
    seen = _uplink_threads(server)
    async with TestDevice(server.ws_url) as dev:
        await dev.connect()
        await speak(dev, "what day is it", "auto")
        reply = await dev.next_reply(timeout=60)
        assert {"what", "day"} <= words(reply.stt or ""), reply.stt
        assert_complete_reply(dev, reply)
    rounds = server.server.uplink_rounds
    if on_loop:
        # Straight from the socket reader in the loop's rounds, or (behind a turn event) as the executor's
        # job on the server's event loop thread (tests/server/conftest.py): never on a listen thread.
        assert rounds.frames > 0
        assert seen <= {"wren-test-server"}, seen
    else:
        assert rounds.frames == 0
        assert seen and all(name.startswith("wren-listen_") for name in seen), seen


async def test_a_listen_stop_right_behind_a_burst_of_audio_is_handled_after_every_frame_of_it(start_server):
    # The frames go into the loop's uplink rounds straight from the socket reader; the `listen stop` read
    # right behind them must not finalise the utterance before the round that feeds them has run.
    server = start_server()
    async with TestDevice(server.ws_url) as dev:
        await dev.connect()
        await dev.listen_start("manual")
        await dev.stream_pcm(spoken_pcm("what day is it", dev.sample_rate), realtime=False)
        await dev.listen_stop()
        reply = await dev.next_reply(timeout=60)
        assert {"what", "day"} <= words(reply.stt or ""), reply.stt
        assert_complete_reply(dev, reply)
    assert server.server.uplink_rounds.frames > 0
