"""Connection bounds (`[limits]` connections, connections_per_ip, handshake_timeout_s, keepalive_timeout_s;
docs/server.md "Limits") against the real server on 127.0.0.1: sockets that never send a request are
closed, idle keep-alive is closed, and past the caps a new WebSocket is refused before it is upgraded,
while the devices already connected are answered as usual.

Other peer addresses come from the loopback network (127.0.0.2, 127.0.0.3 ...), which Linux routes to `lo`.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import socket
import time
from collections.abc import AsyncIterator, Callable

import pytest
import websockets
from wren.config import LimitsConfig
from wren.transport.connection_limits import (
    HANDSHAKE_KEY,
    NO_LIMIT_S,
    SLOTS_KEY,
    WebSocketSlots,
    keepalive_handler_args,
)

from shared_protocol.constants import CLOSE_NO_HELLO
from tests.server.conftest import ServerThread
from tests.support.device import TestDevice

IDLE_SOCKETS = 300


class DeviceFrom(TestDevice):
    """A test device whose socket starts from a given loopback address (another "remote" to the server)."""

    def __init__(self, url: str, source: str = "127.0.0.1", **kwargs: object) -> None:
        super().__init__(url, mcp=False, **kwargs)  # type: ignore[arg-type]
        self.source = source

    async def open(self) -> None:
        headers, url = self._headers_and_url()
        self.ws = await websockets.connect(url, additional_headers=headers, max_size=None, ping_interval=None,
                                           open_timeout=10, local_addr=(self.source, 0))
        self._reader = asyncio.get_running_loop().create_task(self._read())


@contextlib.asynccontextmanager
async def devices() -> AsyncIterator[list[TestDevice]]:
    """A list the test fills with devices; every one is closed at the end, whatever happened."""
    opened: list[TestDevice] = []
    try:
        yield opened
    finally:
        await asyncio.gather(*(dev.close() for dev in opened), return_exceptions=True)


async def connected(opened: list[TestDevice], server: ServerThread, source: str) -> TestDevice:
    dev = DeviceFrom(server.ws_url, source)
    opened.append(dev)
    await dev.connect()
    return dev


async def refused(server: ServerThread, source: str) -> tuple[int, str]:
    """The HTTP status and body with which the server refuses a WebSocket from `source`."""
    with pytest.raises(websockets.exceptions.InvalidStatus) as caught:
        async with websockets.connect(server.ws_url, additional_headers={"Device-Id": "02:00:00:ff:ff:ff"},
                                      open_timeout=10, local_addr=(source, 0)):
            pass
    response = caught.value.response
    return response.status_code, response.body.decode(errors="replace")


async def answered(dev: TestDevice) -> None:
    """A typed query gets its normal spoken reply."""
    await dev.detect("thank you")
    assert "welcome" in (await dev.next_reply(timeout=60)).text.lower()


async def eventually(attempt: Callable[[], object], timeout: float = 10.0) -> None:
    """Retry `attempt` (a coroutine function) until it stops raising: a slot is freed when the closed
    socket's handler has ended, a moment after the client sees the close."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await attempt()  # type: ignore[misc]
            return
        except websockets.exceptions.InvalidStatus:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


# ---- raw sockets --------------------------------------------------------------------------------------


def open_sockets(port: int, count: int, first_bytes: bytes = b"") -> list[tuple[socket.socket, float]]:
    """`count` TCP connections that send `first_bytes` (maybe none), then nothing: (socket, opened at)."""
    opened = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            if first_bytes:
                sock.sendall(first_bytes)
            sock.setblocking(False)
            opened.append((sock, time.monotonic()))
    except BaseException:
        close_all(opened)
        raise
    return opened


def close_all(opened: list[tuple[socket.socket, float]]) -> None:
    for sock, _ in opened:
        sock.close()


def seconds_until_closed(opened: list[tuple[socket.socket, float]], timeout: float) -> list[float | None]:
    """For each socket, how long after it was opened the server closed it (None: still open at `timeout`)."""
    closed: list[float | None] = [None] * len(opened)
    with selectors.DefaultSelector() as selector:
        for index, (sock, _) in enumerate(opened):
            selector.register(sock, selectors.EVENT_READ, index)
        deadline = time.monotonic() + timeout
        while selector.get_map() and time.monotonic() < deadline:
            for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
                sock, opened_at = opened[key.data]
                try:
                    data = sock.recv(4096)
                except (ConnectionResetError, BlockingIOError) as exc:
                    data = b"" if isinstance(exc, ConnectionResetError) else b"?"
                if not data:  # EOF (or a reset): the server closed it
                    closed[key.data] = time.monotonic() - opened_at
                    selector.unregister(sock)
    return closed


# ---- the pieces -----------------------------------------------------------------------------------------


def test_slots_count_per_address_and_free_on_release():
    slots = WebSocketSlots(total=3, per_ip=2)
    with slots.held("10.0.0.1"), slots.held("10.0.0.1"):
        refusal = slots.refusal("10.0.0.1")
        assert refusal is not None and refusal.status == 429 and "Retry-After" in refusal.headers
        assert slots.refusal("10.0.0.2") is None
        with slots.held("10.0.0.2"):
            refusal = slots.refusal("10.0.0.3")
            assert refusal is not None and refusal.status == 503
    assert slots.open == 0 and slots.from_ip("10.0.0.1") == 0 and not slots._by_ip
    assert slots.refused(429) == 1 and slots.refused(503) == 1
    unlimited = WebSocketSlots(total=0, per_ip=0)
    with contextlib.ExitStack() as stack:
        for _ in range(1000):
            stack.enter_context(unlimited.held("10.0.0.1"))
        assert unlimited.refusal("10.0.0.1") is None


def test_keepalive_zero_means_no_limit_not_close_at_once():
    assert keepalive_handler_args(LimitsConfig()) == {"keepalive_timeout": 15.0}
    assert keepalive_handler_args(LimitsConfig(keepalive_timeout_s=0)) == {"keepalive_timeout": NO_LIMIT_S}


# ---- against the real server -----------------------------------------------------------------------------


async def test_hundreds_of_silent_sockets_are_closed_after_the_handshake_timeout_while_a_device_is_answered(
        start_server):
    server = start_server(limits={"handshake_timeout_s": 1.0})
    loop = asyncio.get_running_loop()
    silent = await loop.run_in_executor(None, open_sockets, server.port, IDLE_SOCKETS)
    # A few trickle a request head and never finish it: a slow request is no request either.
    head = b"GET / HTTP/1.1\r\nHost: x\r\n"  # no blank line: the head never ends
    partial = await loop.run_in_executor(None, open_sockets, server.port, 10, head)
    try:
        closing = loop.run_in_executor(None, seconds_until_closed, silent + partial, 20.0)
        async with devices() as opened:
            dev = await connected(opened, server, "127.0.0.1")
            await answered(dev)  # while 310 sockets wait for their deadline
            await asyncio.sleep(1.5)
            await answered(dev)  # a WebSocket past its request head is not touched by the deadline
        closed = await closing
    finally:
        close_all(silent + partial)
    assert all(seconds is not None for seconds in closed), f"{closed.count(None)} sockets still open"
    assert min(closed) >= 0.9 and max(closed) <= 6.0  # type: ignore[type-var]
    deadline = server.server.app[HANDSHAKE_KEY]
    assert deadline.closed >= IDLE_SOCKETS + 10 and deadline.waiting == 0


async def test_idle_keep_alive_connection_is_closed_after_the_keepalive_timeout(start_server):
    server = start_server(limits={"handshake_timeout_s": 1.0, "keepalive_timeout_s": 3.0})
    loop = asyncio.get_running_loop()
    [(sock, _)] = await loop.run_in_executor(
        None, open_sockets, server.port, 1, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        answered_at = time.monotonic()
        reply = b""
        while b"Wren server is running" not in reply and time.monotonic() < answered_at + 10:
            with contextlib.suppress(BlockingIOError):
                reply += sock.recv(4096)
            await asyncio.sleep(0.02)
        assert reply.startswith(b"HTTP/1.1 200") and b"Wren server is running" in reply
        # Past the handshake timeout, but a request was made: only the keep-alive timeout applies now.
        [closed] = await loop.run_in_executor(None, seconds_until_closed, [(sock, answered_at)], 10.0)
    finally:
        sock.close()
    assert closed is not None and 2.5 <= closed <= 6.0


async def test_websocket_that_never_says_hello_is_closed_with_4408_and_frees_its_slot(start_server):
    server = start_server(server={"hello_timeout_s": 1.0}, limits={"connections_per_ip": 1})
    async with devices() as opened:
        silent = DeviceFrom(server.ws_url, "127.0.0.1")
        opened.append(silent)
        await silent.open()
        status, _ = await refused(server, "127.0.0.1")  # the silent socket holds the address's one slot
        assert status == 429
        code, reason = await silent.wait_closed(10)
        assert code == CLOSE_NO_HELLO and reason == "no hello within 1 s"
        await eventually(lambda: connected(opened, server, "127.0.0.1"))
        await answered(opened[-1])


async def test_past_the_caps_a_websocket_is_refused_429_per_address_and_503_in_all_and_others_carry_on(
        start_server):
    server = start_server(limits={"connections": 3, "connections_per_ip": 2})
    slots = server.server.app[SLOTS_KEY]
    async with devices() as opened:
        first = await connected(opened, server, "127.0.0.1")
        await connected(opened, server, "127.0.0.1")
        status, body = await refused(server, "127.0.0.1")
        assert status == 429 and "too many connections from your address" in body
        await connected(opened, server, "127.0.0.2")  # another address still has room: 3 open in all
        status, body = await refused(server, "127.0.0.3")
        assert status == 503 and "server busy" in body
        # A burst of refused clients costs each a short HTTP answer, never a session.
        results = await asyncio.gather(*(refused(server, f"127.0.0.{4 + i % 4}") for i in range(40)))
        assert {status for status, _ in results} == {503}
        assert slots.refused(503) == 41 and slots.refused(429) == 1 and len(server.sessions) == 3
        for dev in opened:
            await answered(dev)
        # A closed connection frees its slot, both in all and for its address.
        await first.close()
        opened.remove(first)
        await eventually(lambda: connected(opened, server, "127.0.0.3"))
        status, _ = await refused(server, "127.0.0.4")
        assert status == 503
        await opened[0].close()
        await eventually(lambda: connected(opened, server, "127.0.0.1"))
        await answered(opened[-1])
        assert slots.open == 3 and slots.from_ip("127.0.0.1") == 1
