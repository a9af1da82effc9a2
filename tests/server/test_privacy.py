"""What people say stays private by default: not in INFO logs, and the data dir is the owner's alone from
the first write."""

from __future__ import annotations

import stat

import pytest
from wren.privacy import log_transcripts, said

from tests.support.device import TestDevice
from tests.support.wren_process import wren_serve

QUERY = "what time is it please"


@pytest.fixture
def served(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    with wren_serve(data) as wren:
        yield wren, data


async def test_a_fresh_data_dir_gets_private_files_and_logs_no_transcripts(served):
    wren, data = served
    async with TestDevice(f"ws://127.0.0.1:{wren.port}/xiaozhi/v1/", mcp=False) as dev:
        await dev.connect()
        await dev.detect(QUERY)
        reply = await dev.next_reply(timeout=30)
        assert reply.text.startswith("It's")
    databases = sorted(p for p in data.iterdir() if p.name.startswith("sessions.sqlite3"))
    assert {p.name for p in databases} >= {"sessions.sqlite3", "sessions.sqlite3-wal", "sessions.sqlite3-shm"}
    for path in databases:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    log = (data / "server.log").read_text()
    assert QUERY not in log and "It's" not in log
    assert f"typed query <{len(QUERY)} chars>" in log


def test_transcripts_are_logged_as_said_only_when_the_owner_asks():
    try:
        log_transcripts(True)
        assert said("hello") == "'hello'"
    finally:
        log_transcripts(False)
    assert said("hello") == "<5 chars>"
