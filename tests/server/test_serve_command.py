"""`wren serve` as a user runs it: binds, answers, serves a device, stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support.device import TestDevice

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def served(tmp_path):
    env = {**os.environ, "WREN_SERVER_DATA_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "wren.cli", "serve", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
    )
    try:
        port = None
        deadline = time.monotonic() + 120
        while port is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if "listening on port" in line:
                port = int(line.rsplit(" ", 1)[1])
        assert port, "wren serve did not start"
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def test_wren_serve_answers_http_and_a_device_then_stops_on_sigterm(served):
    proc, port = served
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
        assert resp.read() == b"Wren server is running"
    async with TestDevice(f"ws://127.0.0.1:{port}/xiaozhi/v1/", mcp=False) as dev:
        await dev.connect()
        await dev.detect("what time is it")
        reply = await dev.next_reply(timeout=30)
        assert reply.frames and reply.text.startswith("It's")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
