"""The boot-time OTA check gives up within minutes, not the ≈ 85 min of a plain doubling from 10 s: the
pause doubles up to a cap and the pauses are capped in total (wren_device.net.ota_check, run by the real
MicroPython against a port nobody listens on, with the schedule scaled down to milliseconds)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

from tests.firmware.conftest import micropython

SCRIPT = """
import asyncio, sys
from wren_device import net
ident = {"device_id": "02:00:00:00:00:01", "client_id": "c", "board": "b", "version": "v", "language": "en"}
url = sys.argv[1]
kw = {"attempts": 10, "first_pause_ms": 10, "max_pause_ms": 40, "max_total_ms": 150}
print("RESULT", asyncio.run(net.ota_check(url, ident, {}, **kw)))
reply = {"websocket": {"url": "ws://h/x/"},
         "server_time": {"timestamp": 1772084756816, "timezone_offset": -300}}
print("CLOCK", net.server_clock(reply), net.server_clock({}), net.server_clock(None))
print("WS", net.websocket_of(reply), net.websocket_of({"websocket": {}}))
"""


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_ota_retries_are_capped_in_pause_and_in_total(tmp_path: Path) -> None:
    script = tmp_path / "ota_retry.py"
    script.write_text(SCRIPT)
    async with micropython(str(script), f"http://127.0.0.1:{closed_port()}/xiaozhi/ota/") as mp:
        assert await mp.finish(30) == 0, mp.output()
    log = mp.output()
    pauses = [int(n) for n in re.findall(r"ota: retry in (\d+) ms", log)]
    assert pauses == [10, 20, 40, 40, 40], log  # doubling, capped at 40; 150 in all, then no more
    assert "ota: giving up after 6 attempts" in log and "RESULT None" in log
    assert "CLOCK (1772084756816, -300) None None" in log
    assert "WS {'url': 'ws://h/x/'} None" in log


def test_the_default_schedule_ends_within_five_minutes() -> None:
    # 10 s doubling, a minute at most, 5 minutes of pauses in all: the defaults of ota_check.
    text = (Path(__file__).parents[2] / "firmware" / "wren_device" / "net.py").read_text()
    sig = re.search(r"first_pause_ms=(\d+), max_pause_ms=(\d+),\s+max_total_ms=(\d+)", text)
    assert sig, "ota_check's schedule parameters moved"
    first, cap, total = map(int, sig.groups())
    pauses, pause = [], first
    while len(pauses) + 1 < 10 and sum(pauses) + pause <= total:
        pauses.append(pause)
        pause = min(pause * 2, cap)
    assert pauses == [10000, 20000, 40000, 60000, 60000, 60000] and sum(pauses) == 250000
