"""The concurrency bench's `UplinkClock`: one task paces every device's uplink, with the schedule of
`TestDevice.stream_packets` (60 ms slots on absolute deadlines, a `None` slot sends nothing), over a real
WebSocket on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace

import pytest
import websockets

from shared_protocol import audio
from tools.bench.streaming_devices import FRAME_MS, UplinkClock

Recorder = tuple[int, list[tuple[float, bytes]]]  # the server's port, what it received


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    """A real WebSocket server on loopback that records every message with its arrival time."""
    got: list[tuple[float, bytes]] = []

    async def handler(ws) -> None:  # type: ignore[no-untyped-def]
        async for message in ws:
            got.append((time.monotonic(), message))

    server = await websockets.serve(handler, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], got
    finally:
        server.close()
        await server.wait_closed()


@pytest.fixture
async def two_devices(recorder: Recorder) -> AsyncIterator[tuple[SimpleNamespace, SimpleNamespace]]:
    """Two devices (what the clock reads of one: its socket and protocol version) connected to `recorder`."""
    url = f"ws://127.0.0.1:{recorder[0]}"
    async with websockets.connect(url) as a, websockets.connect(url) as b:
        yield SimpleNamespace(ws=a, protocol_version=1), SimpleNamespace(ws=b, protocol_version=1)


@pytest.fixture
async def clock() -> AsyncIterator[UplinkClock]:
    clock = UplinkClock()
    try:
        yield clock
    finally:
        await clock.close()


async def test_every_packet_arrives_whole_and_in_order_on_its_slot(
    recorder: Recorder, clock: UplinkClock
) -> None:
    port, got = recorder
    async with websockets.connect(f"ws://127.0.0.1:{port}") as ws:
        dev = SimpleNamespace(ws=ws, protocol_version=1)
        timeline = [b"\x01" * 200, None, b"\x02" * 90, b"\x01" * 200]
        sent: list[float] = []
        lags: list[float] = []
        start = time.monotonic()
        count = await clock.stream(dev, iter(timeline), sent, lags)
        for _ in range(50):
            if len(got) == 3:
                break
            await asyncio.sleep(0.01)
    assert count == 3
    assert [m for _, m in got] == [b"\x01" * 200, b"\x02" * 90, b"\x01" * 200]
    assert len(sent) == len(lags) == 3
    # Slots 0, 2 and 3: never early, and the None slot kept its place on the clock.
    for at, slot in zip(sent, (0, 2, 3), strict=True):
        assert at - start >= slot * FRAME_MS / 1000 - 0.002
    assert sent[1] - sent[0] >= 2 * FRAME_MS / 1000 - 0.002
    assert all(lag >= 0 for lag in lags)


async def test_two_streams_share_the_clock_and_a_closed_connection_fails_its_stream(
    two_devices: tuple[SimpleNamespace, SimpleNamespace], clock: UplinkClock
) -> None:
    a, b = two_devices
    first = clock.stream(a, iter([b"a"] * 3), [], [])
    await b.ws.close()
    second = clock.stream(b, iter([b"b"] * 3), [], [])
    assert await first == 3
    with pytest.raises(ConnectionError, match="closed"):
        await second


async def test_a_stream_whose_device_stopped_waiting_ends_and_the_others_go_on(
    recorder: Recorder, two_devices: tuple[SimpleNamespace, SimpleNamespace], clock: UplinkClock
) -> None:
    _, got = recorder
    a, b = two_devices
    abandoned = clock.stream(a, iter([b"a"] * 10), [], [])
    kept = clock.stream(b, iter([b"b"] * 4), [], [])
    abandoned.cancel()
    assert await kept == 4
    await asyncio.sleep(0.05)
    assert [m for _, m in got].count(b"a") == 1  # only the slot sent when it started
    assert [m for _, m in got].count(b"b") == 4


async def test_devices_on_different_protocol_versions_each_get_their_own_framing(
    recorder: Recorder, two_devices: tuple[SimpleNamespace, SimpleNamespace], clock: UplinkClock
) -> None:
    _, got = recorder
    a, b = two_devices
    b.protocol_version = 3
    packet = b"\x07" * 40
    assert await clock.stream(a, iter([packet]), [], []) == 1
    assert await clock.stream(b, iter([packet]), [], []) == 1
    for _ in range(50):
        if len(got) == 2:
            break
        await asyncio.sleep(0.01)
    assert sorted(m for _, m in got) == sorted([audio.pack(1, packet), audio.pack(3, packet)])
