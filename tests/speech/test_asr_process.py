"""ASR in worker processes: same words as in-process, parallel streams, a dying worker, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from wren.config import AsrConfig, VadConfig
from wren.pipeline.frames import Utterance
from wren.pipeline.turn_detection import ListenMode
from wren.pipeline.uplink import Uplink, utterance_of
from wren.speech.asr import AsrError, load_asr
from wren.speech.asr.workers import ProcessAsrEngine
from wren.speech.asr.workers.channel import Partial
from wren.speech.codec import make_decoder

from tests.speech.conftest import CHUNK_60MS_16K, feed_in_chunks, recognise, spoken

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SENTENCES = ("what time is it", "set the volume to thirty")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"  # a zombie is dead, only not yet reaped
    except FileNotFoundError:
        return False


def _wait_dead(pids: list[int], timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


@pytest.fixture(scope="module")
def process_engine():
    engine = load_asr(AsrConfig(engine="pocketsphinx", pool_size=2, workers=2))
    yield engine
    engine.close()


def test_default_config_runs_asr_in_up_to_two_worker_processes():
    assert AsrConfig().workers == min(2, os.cpu_count() or 1)


@pytest.mark.parametrize("text", SENTENCES)
def test_a_fresh_process_engine_recognises_like_the_in_process_one(pocketsphinx_engine, text):
    """The first utterance of a fresh engine included (each worker starts from the bundled model's prior)."""
    engine = load_asr(AsrConfig(engine="pocketsphinx", pool_size=1, workers=1))
    try:
        assert isinstance(engine, ProcessAsrEngine)
        first = recognise(engine, spoken(text))
        assert first == recognise(pocketsphinx_engine, spoken(text)) == text
        assert recognise(engine, spoken(text)) == text  # and again on the now-used recogniser
    finally:
        engine.close()


def test_concurrent_streams_run_on_both_workers(process_engine):
    streams = [process_engine.open_stream(speaker=f"device-{i}") for i in range(2)]
    assert {s.worker.pid for s in streams} == set(process_engine.worker_pids)  # least-loaded: one each
    results: dict[int, str] = {}

    def speak(index: int) -> None:
        feed_in_chunks(streams[index], spoken(SENTENCES[index]))
        results[index] = streams[index].finish()

    threads = [threading.Thread(target=speak, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    for stream in streams:
        stream.close()
    assert results == {0: SENTENCES[0], 1: SENTENCES[1]}


def test_partial_results_arrive_while_audio_streams(process_engine):
    with process_engine.open_stream() as stream:
        pcm = spoken("set the volume to thirty")
        feed_in_chunks(stream, pcm[: len(pcm) * 3 // 4])
        assert stream.partial().startswith("set the")
        feed_in_chunks(stream, pcm[len(pcm) * 3 // 4 :])
        assert stream.finish() == "set the volume to thirty"
        assert stream.partial() == "set the volume to thirty"


def test_a_speakers_channel_adaptation_follows_it_to_any_worker(process_engine):
    """finish() brings the speaker's cepstral mean back; the next open carries it to whichever worker."""
    assert process_engine.speaker_cmn("kitchen") is None
    with process_engine.open_stream(speaker="kitchen") as stream:
        feed_in_chunks(stream, spoken("what time is it"))
        assert stream.finish() == "what time is it"
    cmn = process_engine.speaker_cmn("kitchen")
    assert cmn is not None and len(cmn.split(",")) == 13
    busy = process_engine.open_stream()  # occupy one worker so the speaker lands on the other
    try:
        with process_engine.open_stream(speaker="kitchen") as stream:
            assert stream.worker is not busy.worker
            feed_in_chunks(stream, spoken("set the volume to thirty"))
            assert stream.finish() == "set the volume to thirty"
    finally:
        busy.close()
    assert process_engine.speaker_cmn("kitchen") != cmn  # adapted further on the other worker


def test_a_stream_dropped_without_close_is_released_in_the_worker(process_engine):
    stream = process_engine.open_stream()
    stream.accept(spoken("what time is it")[:CHUNK_60MS_16K])
    worker, sid = stream.worker, stream.sid
    assert worker.channel.request(Partial, sid).text == ""  # the worker holds it
    del stream  # never closed (a bug elsewhere): the worker must not keep its recogniser forever
    assert sid in worker.channel.dropped
    with pytest.raises(AsrError, match="unknown ASR stream"):  # the next message carried the release
        worker.channel.request(Partial, sid)
    assert sid not in worker.channel.dropped


def test_accept_never_blocks_on_a_stalled_worker_and_overflow_fails_only_that_stream(monkeypatch):
    """A worker that stops reading (SIGSTOP: as if hopelessly behind) fills its 64 KB pipe; accept() must
    return anyway, and past the outbox bound the stream fails loudly instead of stalling the caller."""
    from wren.speech.asr.workers import channel

    monkeypatch.setattr(channel, "MAX_QUEUED_AUDIO_BYTES", 16000 * 2 * 4)  # 4 s of audio
    engine = load_asr(AsrConfig(engine="pocketsphinx", pool_size=1, workers=1))
    outcome: dict[str, object] = {}
    try:
        stream = engine.open_stream(speaker="porch")
        os.kill(stream.worker.pid, signal.SIGSTOP)

        def feed() -> None:
            try:
                feed_in_chunks(stream, spoken("what time is it") * 8)  # ≈16 s: far more than pipe + bound
                outcome["result"] = "all accepted"
            except AsrError as exc:
                outcome["result"] = exc

        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        feeder.join(60)
        stalled = feeder.is_alive()
        os.kill(stream.worker.pid, signal.SIGCONT)
        assert not stalled, "accept() blocked on a full pipe"
        assert isinstance(outcome["result"], AsrError) and "behind" in str(outcome["result"])
        with pytest.raises(AsrError):
            stream.finish()
        stream.close()
        assert engine.restarts == 0  # the worker itself is fine: it catches up and serves the next stream
        assert recognise(engine, spoken("set the volume to thirty")) == "set the volume to thirty"
    finally:
        engine.close()


def test_killing_a_worker_mid_stream_fails_that_stream_and_the_next_stream_works():
    engine = load_asr(AsrConfig(engine="pocketsphinx", pool_size=1, workers=1))
    try:
        stream = engine.open_stream(speaker="hall")
        pcm = spoken("what time is it")
        feed_in_chunks(stream, pcm[: len(pcm) // 2])
        victim = stream.worker.pid
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(AsrError, match="exited"):
            feed_in_chunks(stream, pcm[len(pcm) // 2 :])  # the failure may surface at accept ...
            stream.finish()  # ... or at the latest here
        stream.close()  # closing a failed stream is fine
        engine.wait_all_ready(120)
        assert engine.worker_pids != [victim] and engine.restarts == 1
        assert not _alive(victim)
        assert recognise(engine, spoken("set the volume to thirty")) == "set the volume to thirty"
    finally:
        engine.close()


def test_a_dead_worker_turns_the_utterance_into_one_without_text(silero_vad):
    """What the session sees: the uplink reports speech but no words, and the next utterance is heard."""
    engine = load_asr(AsrConfig(engine="pocketsphinx", pool_size=1, workers=1))
    speech = SimpleNamespace(vad=silero_vad, asr=engine)

    def utterance(first_half_then: Callable[[], None] | None = None) -> Utterance:
        uplink = Uplink(speech, VadConfig(), make_decoder("pcm", 16000), 16000, ListenMode.MANUAL, "lounge")
        try:
            chunks = [pcm[i : i + CHUNK_60MS_16K] for i in range(0, len(pcm), CHUNK_60MS_16K)]
            for index, chunk in enumerate(chunks):
                if first_half_then is not None and index == len(chunks) // 2:
                    assert uplink.heard_speech
                    first_half_then()
                uplink.feed_run([chunk])
            found = utterance_of(uplink.end())
            assert found is not None
            return found
        finally:
            uplink.close()

    try:
        pcm = spoken("what time is it")
        (pid,) = engine.worker_pids
        lost = utterance(first_half_then=lambda: os.kill(pid, signal.SIGKILL))
        assert lost.heard_speech and lost.text == ""
        deadline = time.monotonic() + 120
        while pid in engine.worker_pids and time.monotonic() < deadline:  # the supervisor saw it die
            time.sleep(0.05)
        engine.wait_all_ready(120)
        assert utterance().text == "what time is it"
    finally:
        engine.close()


def test_close_stops_every_worker_and_fails_open_streams():
    engine = load_asr(AsrConfig(engine="pocketsphinx", pool_size=1, workers=2))
    pids = engine.worker_pids
    stream = engine.open_stream()
    stream.accept(spoken("what time is it")[:CHUNK_60MS_16K])
    engine.close()
    assert _wait_dead(pids) == []
    with pytest.raises(AsrError):
        stream.finish()
    with pytest.raises(AsrError, match="no ASR worker"):
        engine.open_stream()


def test_a_worker_that_cannot_load_fails_at_startup_with_the_reason(tmp_path):
    with pytest.raises(AsrError, match="mdef missing"):
        load_asr(AsrConfig(engine="pocketsphinx", model_path=str(tmp_path), workers=1))


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            children += [int(c) for c in f.read().split()]
    return children


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL])
def test_no_asr_worker_outlives_wren_serve(tmp_path, stop_signal):
    env = {**os.environ, "WREN_SERVER_DATA_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1",
           "WREN_ASR_ENGINE": "pocketsphinx", "WREN_ASR_WORKERS": "2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "wren.cli", "serve", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        started = False
        while not started and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            started = "listening on port" in line
        assert started, "wren serve did not start"
        workers = _children(proc.pid)
        assert len(workers) >= 2  # the ASR worker processes (plus multiprocessing's resource tracker)
        proc.send_signal(stop_signal)
        proc.wait(60)
        if stop_signal == signal.SIGTERM:
            assert proc.returncode == 0
        # SIGKILL gives the server no chance to clean up: the workers see their pipe close and leave.
        assert _wait_dead(workers) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_phrase_bias_reaches_the_recogniser_in_the_worker(process_engine):
    from wren.agent.vocabulary import recognition_phrases

    stream = process_engine.open_stream()
    try:
        stream.bias(recognition_phrases(), 4.0)
        stream.accept(spoken("goodbye"))
        assert stream.finish() == "goodbye"  # unbiased, pocketsphinx hears "the bike"
    finally:
        stream.close()
