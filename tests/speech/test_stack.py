from __future__ import annotations

import logging

import pytest
from wren.config import Config
from wren.speech import SpeechStack
from wren.speech.asr import AsrError
from wren.speech.asr.workers import ProcessAsrEngine
from wren.speech.webrtc_vad import WebrtcVadModel


def test_stack_loads_the_default_offline_engines_once_and_logs_load_times(caplog):
    caplog.set_level(logging.INFO, logger="wren.speech")
    stack = SpeechStack.load(Config())
    assert (stack.vad.engine, stack.asr.name, stack.tts.name) == ("silero", "moonshine", "piper")
    assert stack.asr.sample_rate == 16000 and stack.tts.sample_rate == 22050
    assert set(stack.load_seconds) == {"vad", "asr", "tts"}
    assert all(seconds > 0 for seconds in stack.load_seconds.values())
    assert any("asr (moonshine) loaded in" in r.getMessage() for r in caplog.records)
    stack.close()
    stack.close()  # idempotent
    with pytest.raises(AsrError):
        stack.asr.open_stream()


def test_pocketsphinx_runs_in_worker_processes_off_the_servers_gil():
    config = Config()
    config.asr.engine = "pocketsphinx"
    stack = SpeechStack.load(config)
    assert isinstance(stack.asr, ProcessAsrEngine)
    workers = stack.asr.worker_pids
    assert len(workers) == Config().asr.workers
    stack.close()
    stack.close()  # idempotent
    with pytest.raises(AsrError):
        stack.asr.open_stream()


def test_stack_follows_the_config_sections():
    config = Config()
    config.vad.engine = "webrtc"
    config.asr.engine = "pocketsphinx"
    config.asr.pool_size = 1
    config.asr.workers = 0
    stack = SpeechStack.load(config)
    assert isinstance(stack.vad, WebrtcVadModel)
    assert stack.asr.pool.idle == 1
    stack.close()  # nothing outside the process: a no-op


def test_a_bad_engine_name_fails_at_load_not_at_first_use():
    config = Config()
    config.asr.engine = "nope"
    with pytest.raises(AsrError, match="unknown ASR engine"):
        SpeechStack.load(config)
    config = Config()
    config.vad.engine = "nope"
    with pytest.raises(ValueError, match="unknown VAD engine"):
        SpeechStack.load(config)
