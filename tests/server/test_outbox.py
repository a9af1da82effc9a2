"""`Outbox`, the one write path to a device, on a fake connection: the live-turn guard, `tts start` /
`tts stop` pairing, a stuck peer, close codes and audio framing. No socket, no server."""

from __future__ import annotations

import asyncio
import json

import pytest
from wren.session import outbox as outbox_module
from wren.session.outbox import CURRENT_TURN, Outbox
from wren.session.services import ConnectionClosed

from shared_protocol import audio, messages
from shared_protocol.constants import (
    CLOSE_NO_HELLO,
    CLOSE_NORMAL,
    CLOSE_REASONS,
    CLOSE_SEND_TIMEOUT,
    CLOSE_UNAUTHORIZED,
)

SESSION = "session-1"


class FakeConnection:
    """Records what is written and how it is closed.

    `stuck`: a send never completes (the device stopped reading, its TCP window is full);
    `dead_when_closed`: a send after close also never completes (else it raises ConnectionClosed, as
    wren.transport.connection does)."""

    def __init__(self, stuck: bool = False, dead_when_closed: bool = False, close_hangs: bool = False,
                 close_raises: bool = False) -> None:
        self.stuck = stuck
        self.dead_when_closed = dead_when_closed
        self.close_hangs = close_hangs
        self.close_raises = close_raises
        self.sent: list[str | bytes] = []
        self.events: list[tuple[str, str | bytes]] = []
        self.closes: list[tuple[int, str]] = []
        self.send_attempts = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def send_text(self, text: str) -> None:
        await self._send(text)

    async def send_bytes(self, data: bytes) -> None:
        await self._send(data)

    async def _send(self, data: str | bytes) -> None:
        self.send_attempts += 1
        if self._closed and not self.dead_when_closed:
            raise ConnectionClosed()
        if self.stuck:
            await asyncio.get_running_loop().create_future()  # never completes
        self.events.append(("begin", data))
        await asyncio.sleep(0)  # a real write yields to the loop part-way
        self.events.append(("end", data))
        self.sent.append(data)

    async def close(self, code: int, reason: str) -> None:
        self.closes.append((code, reason))
        if self.close_raises:
            raise OSError("the socket is already gone")
        if self.close_hangs:
            await asyncio.get_running_loop().create_future()
        self._closed = True

    def messages(self) -> list[dict]:
        return [json.loads(item) for item in self.sent if isinstance(item, str)]

    def tts_states(self) -> list[str]:
        return [m["state"] for m in self.messages() if m["type"] == "tts"]


def make_outbox(**conn_options) -> tuple[Outbox, FakeConnection]:
    conn = FakeConnection(**conn_options)
    return Outbox(conn, SESSION, "test-device"), conn


def sentence(text: str) -> dict:
    return messages.tts_sentence_start(SESSION, text)


@pytest.fixture
def short_send_timeout(monkeypatch):
    monkeypatch.setattr(outbox_module, "SEND_TIMEOUT_S", 0.1)
    return 0.1


# ---- the live-turn guard --------------------------------------------------------------------------


async def test_send_for_refuses_a_turn_that_never_went_live():
    outbox, conn = make_outbox()
    assert await outbox.send_for(1, sentence("Hi.")) is False
    assert conn.sent == []


async def test_send_for_sends_for_the_live_turn_only():
    outbox, conn = make_outbox()
    outbox.go_live(2)
    assert await outbox.send_for(2, sentence("Hi.")) is True
    assert await outbox.send_for(1, sentence("Old.")) is False
    assert conn.messages() == [sentence("Hi.")]


async def test_send_for_refuses_after_end_turn():
    outbox, conn = make_outbox()
    outbox.go_live(3)
    outbox.end_turn(3)
    assert await outbox.send_for(3, sentence("Late.")) is False
    assert conn.sent == []


async def test_ending_another_turn_leaves_the_live_one_live():
    outbox, _ = make_outbox()
    outbox.go_live(4)
    outbox.end_turn(3)
    assert outbox.is_live(4)
    assert await outbox.send_for(4, sentence("Still here."))


async def test_send_for_refuses_after_cancel_live():
    outbox, conn = make_outbox()
    outbox.go_live(5)
    await outbox.cancel_live("barge-in")
    assert outbox.live_turn is None
    assert await outbox.send_for(5, sentence("Late.")) is False
    assert await outbox.send_audio_for(5, b"\x01\x02", 0) is False
    assert conn.sent == []


async def test_nothing_is_sent_for_a_turn_once_the_connection_is_closed():
    outbox, conn = make_outbox()
    outbox.go_live(1)
    await outbox.close(CLOSE_NORMAL)
    assert not outbox.is_live(1)
    assert await outbox.send_for(1, sentence("Hi.")) is False
    with pytest.raises(ConnectionClosed):
        await outbox.send({"type": "pong"})
    assert conn.send_attempts == 0


# ---- tts start / tts stop pairing ----------------------------------------------------------------


async def test_tts_start_then_tts_stop_twice_sends_exactly_one_stop():
    outbox, conn = make_outbox()
    outbox.go_live(1)
    assert await outbox.tts_start(1) is True
    assert outbox.speaking
    assert await outbox.tts_stop(1, "finished") is True
    assert await outbox.tts_stop(1, "finished again") is False
    assert conn.tts_states() == ["start", "stop"]
    assert conn.messages()[-1] == messages.tts_stop(SESSION)
    assert not outbox.speaking


async def test_a_cancelled_turn_gets_one_stop_from_cancel_live_and_none_from_its_own_tts_stop():
    outbox, conn = make_outbox()
    outbox.go_live(1)
    await outbox.tts_start(1)
    assert await outbox.cancel_live("abort") is True
    assert await outbox.tts_stop(1, "the reply task ended") is False
    assert conn.tts_states() == ["start", "stop"]


async def test_tts_start_of_a_turn_that_is_not_live_sends_nothing_and_opens_nothing():
    outbox, conn = make_outbox()
    outbox.go_live(2)
    assert await outbox.tts_start(1) is False
    assert not outbox.speaking
    assert await outbox.tts_stop(1, "finished") is False
    assert conn.sent == []


async def test_cancel_live_without_a_live_turn_sends_nothing():
    outbox, conn = make_outbox()
    assert await outbox.cancel_live("abort") is False
    assert conn.sent == []


async def test_cancel_live_of_a_turn_that_never_started_speaking_sends_nothing():
    outbox, conn = make_outbox()
    outbox.go_live(1)
    assert await outbox.cancel_live("abort") is False
    assert conn.sent == []
    assert outbox.live_turn is None


async def test_answer_abort_always_sends_a_stop():
    outbox, conn = make_outbox()
    await outbox.answer_abort()
    await outbox.answer_abort()
    assert conn.tts_states() == ["stop", "stop"]


async def test_answer_abort_on_a_closed_connection_sends_nothing_and_does_not_raise():
    outbox, conn = make_outbox()
    await outbox.close(CLOSE_NORMAL)
    await outbox.answer_abort()
    assert conn.send_attempts == 0


# ---- device-MCP calls on behalf of a turn --------------------------------------------------------


async def _mcp_as(outbox: Outbox, turn: int | None) -> None:
    token = CURRENT_TURN.set(turn)
    try:
        await outbox.send_mcp({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    finally:
        CURRENT_TURN.reset(token)


async def test_send_mcp_refuses_a_tool_call_of_a_turn_that_is_not_live():
    outbox, conn = make_outbox()
    outbox.go_live(2)
    with pytest.raises(ConnectionClosed, match="turn 1"):
        await _mcp_as(outbox, 1)
    await outbox.cancel_live("abort")
    with pytest.raises(ConnectionClosed):
        await _mcp_as(outbox, 2)
    assert conn.sent == []


async def test_send_mcp_sends_for_the_live_turn_and_outside_any_turn():
    outbox, conn = make_outbox()
    outbox.go_live(2)
    await _mcp_as(outbox, 2)
    await _mcp_as(outbox, None)
    payload = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    assert conn.messages() == [messages.mcp(payload, SESSION)] * 2


# ---- order and a stuck peer ----------------------------------------------------------------------


async def test_concurrent_writes_never_interleave():
    outbox, conn = make_outbox()
    await asyncio.gather(*(outbox.send({"type": "pong", "n": n}) for n in range(3)))
    kinds = [kind for kind, _ in conn.events]
    assert kinds == ["begin", "end"] * 3
    assert [data for _, data in conn.events[::2]] == [data for _, data in conn.events[1::2]]


@pytest.mark.parametrize("dead_when_closed", [False, True])
async def test_a_write_that_never_completes_closes_the_connection_and_fails(
    short_send_timeout, dead_when_closed
):
    outbox, conn = make_outbox(stuck=True, dead_when_closed=dead_when_closed)
    loop = asyncio.get_running_loop()
    started = loop.time()
    failed_at: dict[str, float] = {}

    async def write(name: str) -> None:
        try:
            await outbox.send({"type": "pong", "n": name})
        finally:
            failed_at[name] = loop.time() - started

    first = asyncio.create_task(write("first"))
    await asyncio.sleep(short_send_timeout / 2)
    second = asyncio.create_task(write("second"))  # waits on the write lock the first one holds
    results = await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), 1.0)
    assert all(isinstance(r, ConnectionClosed) for r in results), results
    assert short_send_timeout <= failed_at["first"] < short_send_timeout + 0.1
    # the second fails too, no later than its own timeout
    assert failed_at["second"] < short_send_timeout * 1.5 + 0.1
    assert conn.closes and conn.closes[0] == (CLOSE_SEND_TIMEOUT, "send timeout")
    assert all(code == CLOSE_SEND_TIMEOUT for code, _ in conn.closes)
    assert outbox.closed and conn.sent == []


async def test_a_writer_queued_behind_a_timed_out_write_fails_as_soon_as_it_does(short_send_timeout):
    outbox, conn = make_outbox(stuck=True, dead_when_closed=True)
    loop = asyncio.get_running_loop()
    first = asyncio.create_task(outbox.send({"type": "pong", "n": 1}))
    await asyncio.sleep(short_send_timeout / 2)
    second = asyncio.create_task(outbox.send({"type": "pong", "n": 2}))
    with pytest.raises(ConnectionClosed):
        await first
    first_failed = loop.time()
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(second, 1.0)
    assert loop.time() - first_failed < short_send_timeout / 4
    assert conn.send_attempts == 1  # the queued write never touched the dead connection
    assert conn.closes == [(CLOSE_SEND_TIMEOUT, "send timeout")]


async def test_after_a_send_timeout_later_writes_fail_at_once(short_send_timeout):
    outbox, conn = make_outbox(stuck=True)
    with pytest.raises(ConnectionClosed):
        await outbox.send({"type": "pong"})
    attempts = conn.send_attempts
    with pytest.raises(ConnectionClosed):
        await asyncio.wait_for(outbox.send({"type": "pong"}), 0.05)
    assert conn.send_attempts == attempts


# ---- closing --------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [CLOSE_NORMAL, CLOSE_NO_HELLO, CLOSE_UNAUTHORIZED])
async def test_close_sends_the_code_with_its_reason(code):
    outbox, conn = make_outbox()
    await outbox.close(code)
    assert conn.closes == [(code, CLOSE_REASONS[code])]
    assert outbox.closed


async def test_close_with_a_detail_sends_the_detail_as_the_reason():
    outbox, conn = make_outbox()
    await outbox.close(CLOSE_NORMAL, "no speech; goodbye")
    assert conn.closes == [(CLOSE_NORMAL, "no speech; goodbye")]


async def test_close_with_an_unknown_code_and_no_detail_has_an_empty_reason():
    outbox, conn = make_outbox()
    await outbox.close(4999)
    assert conn.closes == [(4999, "")]


async def test_closing_a_connection_that_is_already_closed_does_nothing():
    outbox, conn = make_outbox()
    await conn.close(CLOSE_NORMAL, "the device hung up")
    conn.closes.clear()
    await outbox.close(CLOSE_NO_HELLO)
    assert conn.closes == [] and outbox.closed


async def test_a_close_that_hangs_is_bounded(monkeypatch):
    monkeypatch.setattr(outbox_module, "CLOSE_TIMEOUT_S", 0.05)
    outbox, conn = make_outbox(close_hangs=True)
    await asyncio.wait_for(outbox.close(CLOSE_NORMAL), 1.0)
    assert outbox.closed and conn.closes == [(CLOSE_NORMAL, CLOSE_REASONS[CLOSE_NORMAL])]


async def test_a_close_that_fails_is_swallowed():
    outbox, conn = make_outbox(close_raises=True)
    await outbox.close(CLOSE_NORMAL)
    assert outbox.closed and len(conn.closes) == 1


# ---- audio framing --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_audio_is_framed_for_the_protocol_version(version):
    outbox, conn = make_outbox()
    outbox.protocol_version = version
    outbox.go_live(1)
    packet = bytes(range(40))
    assert await outbox.send_audio_for(1, packet, 180) is True
    assert conn.sent == [audio.pack(version, packet, 180)]
    assert audio.unpack(version, conn.sent[0])[0] == packet


async def test_audio_timestamps_wrap_at_32_bits():
    outbox, conn = make_outbox()
    outbox.protocol_version = 2
    outbox.go_live(1)
    await outbox.send_audio_for(1, b"\x01\x02", 2**32 + 60)
    assert audio.unpack(2, conn.sent[0]) == (b"\x01\x02", 60)


async def test_audio_of_a_turn_that_is_not_live_is_not_sent():
    outbox, conn = make_outbox()
    outbox.go_live(2)
    assert await outbox.send_audio_for(1, b"\x01\x02", 0) is False
    assert conn.sent == []
