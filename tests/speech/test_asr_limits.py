"""Bounded ASR: the ceiling on open streams ([limits] asr_streams) for every engine, the per-worker share,
what a session does past it, and ASR worker restarts with backoff and a health log line."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest
from wren.config import AsrConfig, VadConfig
from wren.pipeline.turn_detection import ListenMode
from wren.pipeline.uplink import Uplink, utterance_of
from wren.speech import SpeechStack
from wren.speech.asr import AsrError, AsrUnavailable, load_asr
from wren.speech.asr.workers import ProcessAsrEngine
from wren.speech.asr.workers.channel import Open, Partial
from wren.speech.asr.workers.restarts import Backoff, RestartHistory
from wren.speech.codec import make_decoder

from tests.speech.conftest import CHUNK_60MS_16K, recognise, spoken

SUPERVISOR = "wren.speech.asr.workers.supervisor"
WHAT_TIME = "what time is it"


def plain(text: str) -> str:
    return " ".join(re.sub(r"[^\w' ]+", " ", text.lower()).split())


def _engine(kind: str, max_streams: int, **options: object) -> object:
    if kind == "moonshine":
        return load_asr(AsrConfig(engine="moonshine"), max_streams)
    workers = 2 if kind == "pocketsphinx-workers" else 0
    return load_asr(AsrConfig(engine="pocketsphinx", pool_size=1, workers=workers, **options), max_streams)


@pytest.fixture
def make_engine() -> Iterator[Callable[..., object]]:
    """Factory of engines (kind, max_streams); every one is closed after the test."""
    made: list[object] = []

    def make(kind: str, max_streams: int, **options: object) -> object:
        made.append(_engine(kind, max_streams, **options))
        return made[-1]

    yield make
    for engine in made:
        close = getattr(engine, "close", None)
        if close is not None:
            close()


@pytest.fixture
def make_workers() -> Iterator[Callable[..., ProcessAsrEngine]]:
    """Factory of pocketsphinx worker engines with a given backoff; every one is closed after the test."""
    made: list[ProcessAsrEngine] = []

    def make(workers: int = 1, max_streams: int = 0, backoff: Backoff | None = None) -> ProcessAsrEngine:
        config = AsrConfig(engine="pocketsphinx", pool_size=1)
        made.append(ProcessAsrEngine(config, workers, max_streams=max_streams, backoff=backoff))
        return made[-1]

    yield make
    for engine in made:
        engine.close()


def _records(caplog: pytest.LogCaptureFixture, pattern: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == SUPERVISOR and re.search(pattern, r.getMessage())]


def _wait_records(
    caplog: pytest.LogCaptureFixture, pattern: str, count: int = 1, timeout: float = 120.0
) -> list[logging.LogRecord]:
    deadline = time.monotonic() + timeout
    while len(found := _records(caplog, pattern)) < count:
        assert time.monotonic() < deadline, f"no {count} log lines matching {pattern!r}: {caplog.text}"
        time.sleep(0.05)
    return found


# ---- the ceiling, every engine -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["moonshine", "pocketsphinx", "pocketsphinx-workers"])
def test_the_stream_past_the_ceiling_is_refused_and_a_closed_stream_frees_its_place(make_engine, kind):
    engine = make_engine(kind, 2)
    first, second = engine.open_stream(speaker="a"), engine.open_stream(speaker="b")
    with pytest.raises(AsrUnavailable, match=r"2 ASR streams are open \(\[limits\] asr_streams\)"):
        engine.open_stream(speaker="c")
    assert (engine.streams.open, engine.streams.refused) == (2, 1)
    first.close()
    third = engine.open_stream(speaker="c")  # the closed stream's place
    try:
        third.accept(spoken(WHAT_TIME))
        assert plain(third.finish()) == WHAT_TIME  # a stream opened after a refusal works as ever
    finally:
        third.close()
        second.close()
    assert engine.streams.open == 0


def test_a_stream_dropped_without_close_gives_its_place_back(make_engine):
    engine = make_engine("pocketsphinx", 1)
    stream = engine.open_stream()
    with pytest.raises(AsrUnavailable):
        engine.open_stream()
    del stream  # a bug elsewhere must not shrink the ceiling for good
    gc.collect()
    engine.open_stream().close()


def test_in_process_recognisers_never_outnumber_the_ceiling(make_engine):
    """pocketsphinx/vosk create recognisers on demand past the warm pool: the ceiling bounds them too."""
    engine = make_engine("pocketsphinx", 3)
    for _ in range(3):
        streams = [engine.open_stream() for _ in range(3)]
        with pytest.raises(AsrUnavailable):
            engine.open_stream()
        for stream in streams:
            stream.close()
    assert engine.pool.created == 3


def test_zero_means_no_ceiling(make_engine):
    engine = make_engine("pocketsphinx", 0)
    streams = [engine.open_stream() for _ in range(3)]  # more than the warm pool, none refused
    for stream in streams:
        stream.close()
    assert engine.streams.refused == 0


# ---- the worker processes' share -----------------------------------------------------------------------


def test_each_worker_takes_at_most_its_share_and_enforces_it_itself(make_workers):
    engine = make_workers(workers=2, max_streams=3, backoff=Backoff(first_s=30.0))  # share: 2 each
    assert engine.per_worker_streams == 2
    streams = [engine.open_stream() for _ in range(3)]
    assert sorted(w.load for w in engine._workers) == [1, 2]
    with pytest.raises(AsrUnavailable):
        engine.open_stream()
    # The worker process bounds its own recognisers, whatever the server process asks of it.
    full = next(w for w in engine._workers if w.load == 2)
    full.channel.send(Open(10_000, None, None))
    with pytest.raises(AsrError, match="AsrUnavailable: 2 ASR streams are open"):
        full.channel.request(Partial, 10_000)
    for stream in streams:
        stream.close()
    # While one worker is down the other keeps to its share: fewer utterances, none of them late.
    victim, survivor = engine._workers
    os.kill(victim.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while victim.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    held = [engine.open_stream(), engine.open_stream()]
    assert {s.worker.pid for s in held} == {survivor.pid}
    with pytest.raises(AsrUnavailable, match="every running ASR worker holds its 2 streams"):
        engine.open_stream()
    for stream in held:
        stream.close()


# ---- restarts ----------------------------------------------------------------------------------------------


def test_the_pause_doubles_up_to_its_ceiling_and_resets_after_a_healthy_minute():
    history = RestartHistory(Backoff(first_s=0.5, max_s=30.0, healthy_s=60.0))
    history.up(now=0.0)
    assert [history.failed(now=1.0 + i) for i in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert history.up(now=100.0) == 8  # restarts it took
    assert history.failed(now=130.0) == 30.0  # up only 30 s: still backing off
    history.up(now=200.0)
    assert history.failed(now=260.0) == 0.5  # up a whole minute: starts over


def test_a_killed_worker_is_restarted_after_the_logged_pause_and_serves_again(make_workers, caplog):
    caplog.set_level(logging.INFO, logger=SUPERVISOR)
    engine = make_workers(workers=2, backoff=Backoff(first_s=0.3))
    victim_stream = engine.open_stream(speaker="hall")
    victim = victim_stream.worker.pid
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    died_line = r"^asr worker \d died \(exit -9\); restarting in 0\.3 s \(1 of 2 workers up\)$"
    (died,) = _wait_records(caplog, died_line)
    with pytest.raises(AsrError, match="exited"):  # the stream on the dead worker fails, cleanly
        victim_stream.accept(spoken(WHAT_TIME))
        victim_stream.finish()
    victim_stream.close()
    during = engine.open_stream()  # new streams go to the worker that is up
    assert during.worker.pid != victim
    during.close()
    healthy_line = r"^asr worker \d healthy again after 1 restart \(pid \d+; 2 of 2 workers up\)$"
    (healthy,) = _wait_records(caplog, healthy_line)
    assert healthy.created - died.created >= 0.3  # the pause was kept
    assert engine.health().up == 2 and engine.restarts == 1 and victim not in engine.worker_pids
    assert [recognise(engine, spoken(WHAT_TIME)) for _ in range(2)] == [WHAT_TIME] * 2  # on either worker


def test_a_worker_that_keeps_failing_is_retried_with_growing_pauses(make_workers, caplog, tmp_path):
    caplog.set_level(logging.INFO, logger=SUPERVISOR)
    engine = make_workers(workers=1, backoff=Backoff(first_s=0.1, max_s=0.8))
    engine.worker_config["model_path"] = str(tmp_path)  # every replacement now fails to load
    (pid,) = engine.worker_pids
    os.kill(pid, signal.SIGKILL)
    failures = _wait_records(caplog, r"restarting in", count=5)
    pauses = [float(re.search(r"restarting in ([\d.]+) s", r.getMessage()).group(1)) for r in failures]
    assert pauses == [0.1, 0.2, 0.4, 0.8, 0.8]
    assert "died (exit -9)" in failures[0].getMessage()
    assert all("failed to load (AsrError: " in r.getMessage() and "mdef missing" in r.getMessage()
               for r in failures[1:])
    for earlier, later, pause in zip(failures, failures[1:], pauses, strict=False):
        assert later.created - earlier.created >= pause  # never a tight loop
    with pytest.raises(AsrUnavailable, match="no ASR worker is running"):  # a named refusal meanwhile
        engine.open_stream()
    engine.worker_config["model_path"] = ""  # the cause goes away: the next restart loads
    (healthy,) = _wait_records(caplog, r"healthy again after \d+ restarts")
    restarts = int(re.search(r"after (\d+) restarts", healthy.getMessage()).group(1))
    assert restarts == len(_records(caplog, "restarting in")) >= 5
    assert recognise(engine, spoken(WHAT_TIME)) == WHAT_TIME


def test_a_replacement_that_hangs_while_loading_is_killed_and_retried(make_workers, caplog, monkeypatch):
    from wren.speech.asr.workers import supervisor

    caplog.set_level(logging.INFO, logger=SUPERVISOR)
    engine = make_workers(workers=1, backoff=Backoff(first_s=0.1, max_s=0.2))
    monkeypatch.setattr(supervisor, "READY_TIMEOUT_S", 0.01)  # no replacement loads that fast
    os.kill(engine.worker_pids[0], signal.SIGKILL)
    hung = _wait_records(caplog, r"did not load within 0 s; restarting in 0\.2 s", count=2)
    assert engine.restarts >= len(hung) and engine.health().up == 0
    monkeypatch.setattr(supervisor, "READY_TIMEOUT_S", 120.0)
    _wait_records(caplog, r"healthy again after \d+ restarts")
    assert recognise(engine, spoken(WHAT_TIME)) == WHAT_TIME


def test_closing_the_engine_during_a_restart_pause_ends_it_at_once(make_workers, caplog):
    caplog.set_level(logging.INFO, logger=SUPERVISOR)
    engine = make_workers(workers=1, backoff=Backoff(first_s=30.0))
    os.kill(engine.worker_pids[0], signal.SIGKILL)
    _wait_records(caplog, r"restarting in 30\.0 s")
    started = time.monotonic()
    engine.close()
    assert time.monotonic() - started < 10
    assert engine.restarts == 0  # no replacement was started after close


# ---- what the uplink and the session make of a refusal ------------------------------------------------


def _utterance(speech: object, pcm: bytes) -> object:
    uplink = Uplink(speech, VadConfig(), make_decoder("pcm", 16000), 16000, ListenMode.MANUAL, "porch")
    try:
        for i in range(0, len(pcm), CHUNK_60MS_16K):
            uplink.feed_run([pcm[i : i + CHUNK_60MS_16K]])
        found = utterance_of(uplink.end())
        assert found is not None
        return found
    finally:
        uplink.close()


def test_an_utterance_past_the_ceiling_says_so_and_the_next_one_is_heard(make_engine, silero_vad):
    engine = make_engine("moonshine", 1)
    speech = SimpleNamespace(vad=silero_vad, asr=engine)
    held = engine.open_stream()  # another device's utterance
    refused = _utterance(speech, spoken(WHAT_TIME))
    assert refused.asr_unavailable and refused.heard_speech and refused.text == ""
    held.close()
    heard = _utterance(speech, spoken(WHAT_TIME))
    assert not heard.asr_unavailable and plain(heard.text) == WHAT_TIME


@pytest.fixture(scope="module")
def capped_server(silero_vad, piper_engine, tmp_path_factory):
    """A real server whose recogniser takes one stream at a time ([limits] asr_streams = 1)."""
    from tests.server.conftest import ServerThread, make_config

    config = make_config(tmp_path_factory.mktemp("wren-data"), limits={"asr_streams": 1})
    asr = load_asr(AsrConfig(engine="moonshine"), config.limits.asr_streams)
    server = ServerThread(config, SpeechStack(vad=silero_vad, asr=asr, tts=piper_engine))
    try:
        yield server.start()
    finally:
        server.stop()
        asr.close()


async def test_a_device_past_the_ceiling_hears_busy_and_another_keeps_its_turn(capped_server):
    from wren.session.turn_taking import ASR_BUSY_REPLY

    from tests.server.helpers import speak
    from tests.support.device import TestDevice
    from tests.support.spoken import spoken_pcm

    asr = capped_server.server.speech.asr
    async with TestDevice(capped_server.ws_url, mcp=False) as first, \
            TestDevice(capped_server.ws_url, mcp=False) as second:
        await first.connect()
        await second.connect()
        await first.listen_start("manual")
        await first.stream_pcm(spoken_pcm(WHAT_TIME))  # holds the only recogniser until its listen stop
        deadline = time.monotonic() + 30
        while asr.streams.open < 1 and time.monotonic() < deadline:  # its speech onset opened it
            await asyncio.sleep(0.05)
        assert asr.streams.open == 1
        await speak(second, "what day is it", "manual")
        busy = await second.next_reply(timeout=60)
        assert busy.stt is None and busy.text == ASR_BUSY_REPLY and busy.frames  # spoken, no `stt`
        await first.listen_stop()
        answered = await first.next_reply(timeout=60)
        assert plain(answered.stt or "") == WHAT_TIME and answered.frames
        await speak(second, "what day is it", "manual")  # the place is free again: a normal turn
        normal = await second.next_reply(timeout=60)
        assert plain(normal.stt or "") == "what day is it" and normal.text != ASR_BUSY_REPLY
        assert not first.closed.is_set() and not second.closed.is_set()
    assert asr.streams.refused == 1 and asr.streams.open == 0
