"""`wren serve` as a user runs it: binds, answers, serves a device, stops cleanly on SIGTERM."""

from __future__ import annotations

import signal
import sys
import urllib.request

import pytest

from shared_protocol.constants import CLOSE_GOING_AWAY
from tests.support.device import TestDevice
from tests.support.wren_process import wren_serve


@pytest.fixture
def served(tmp_path):
    with wren_serve(tmp_path) as wren:
        yield wren.proc, wren.port


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


async def test_sigterm_with_a_device_connected_closes_it_with_going_away_and_exits_cleanly(served):
    proc, port = served
    async with TestDevice(f"ws://127.0.0.1:{port}/xiaozhi/v1/", mcp=False) as dev:
        await dev.connect()
        proc.send_signal(signal.SIGTERM)
        code, reason = await dev.wait_closed(15)
        assert (code, reason) == (CLOSE_GOING_AWAY, "server shutting down")
    assert proc.wait(30) == 0


def test_the_server_process_takes_its_gil_switch_interval_from_the_config() -> None:
    """`wren serve` sets it before anything starts (20 ms by default: the event loop's rounds of uplink work
    are not cut every 5 ms by a waiting recogniser thread)."""
    from wren.commands.serve import set_gil_switch_interval
    from wren.config import Config

    before = sys.getswitchinterval()
    try:
        set_gil_switch_interval(Config().server.gil_switch_interval_ms)
        assert sys.getswitchinterval() == pytest.approx(0.020)
        set_gil_switch_interval(5)
        assert sys.getswitchinterval() == pytest.approx(0.005)
    finally:
        sys.setswitchinterval(before)
