"""Memory: the server's RSS with 0, 100 and 200 connected idle devices, and the increment per device.

Each device is a tests/support/device.py TestDevice that connects, says hello (with device MCP, so
the server also lists its tools) and then stays connected and idle, as a device waiting for its wake
word does. RSS (psutil) is read after the connections settle, as the median of a few samples. The
baseline is taken on a server that has already served turns (models loaded, pools warm), so the
increment is what a connection costs, not a one-off warm-up. A last sample puts every device in the
listening state (auto mode, no audio yet), which adds a VAD stream each.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.bench.common import ServerProcess, device_id, fmt, write_json

MB = 2**20


async def _rss(server: ServerProcess, settle_s: float) -> float:
    await asyncio.sleep(settle_s)
    samples = []
    for _ in range(5):
        samples.append(server.rss_bytes())
        await asyncio.sleep(0.2)
    return statistics.median(samples) / MB


async def run_async(server: ServerProcess, steps: list[int], run_id: int = 50) -> dict:
    from tests.support.device import TestDevice

    devices: list[Any] = []
    gate = asyncio.Semaphore(20)

    async def connect(dev: Any) -> None:
        async with gate:
            await dev.connect(timeout=30)

    rows = [
        {
            "devices": 0,
            "rss_mb": round(await _rss(server, 1.0), 1),
            "with_asr_workers_mb": round(server.rss_bytes(with_children=True) / MB, 1),
        }
    ]
    for target in steps:
        new = [TestDevice(server.ws_url, device_id(run_id, i)) for i in range(len(devices), target)]
        devices.extend(new)
        await asyncio.gather(*(connect(d) for d in new))
        rows.append({"devices": target, "rss_mb": round(await _rss(server, 2.0), 1)})
    try:
        await asyncio.gather(*(d.listen_start("auto") for d in devices))
        listening = {"devices": len(devices), "rss_mb": round(await _rss(server, 2.0), 1)}
    finally:
        await asyncio.gather(*(d.close() for d in devices), return_exceptions=True)
    after = round(await _rss(server, 2.0), 1)
    base = rows[0]["rss_mb"]
    top = rows[-1]
    return {
        "rows": rows,
        "per_device_kb": round((top["rss_mb"] - base) * 1024 / max(1, top["devices"]), 1),
        "listening": listening,
        "listening_per_device_kb": round(
            (listening["rss_mb"] - base) * 1024 / max(1, listening["devices"]), 1
        ),
        "after_disconnect_mb": after,
    }


def run(server: ServerProcess, quick: bool) -> dict:
    return asyncio.run(run_async(server, [4, 8] if quick else [100, 200]))


async def _warm(server: ServerProcess) -> None:
    """One spoken turn, so models, pools and the agent are warm before the baseline."""
    from tests.support.device import TestDevice
    from tools.bench.common import SENTENCES, utterances

    utt = utterances(SENTENCES[:1])[0]
    async with TestDevice(server.ws_url, device_id(49, 0)) as dev:
        await dev.connect()
        await dev.listen_start("manual")
        await dev.stream_packets(utt.packets)
        await dev.listen_stop()
        await dev.next_reply(60)


def print_table(res: dict) -> None:
    print(
        "server RSS: "
        + ", ".join(f"{r['devices']} devices {fmt(r['rss_mb'], ' MB')}" for r in res["rows"])
        + f"; {fmt(res['per_device_kb'], ' KB')} per idle device; listening "
        f"{fmt(res['listening_per_device_kb'], ' KB')} per device"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 and 10 devices")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    with ServerProcess() as server:
        asyncio.run(_warm(server))
        started = time.monotonic()
        res = run(server, args.quick)
        res["seconds"] = round(time.monotonic() - started, 1)
    print_table(res)
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
