"""The one write path to a device: every frame the server sends goes through `Outbox`.

What it guarantees, in one place (websockets' `send_context()` idea):
- **Order and exclusion.** Writes are serialised by one lock, so a paced audio frame, a `tts stop` and a
  device-MCP request never interleave oddly, whoever sends them.
- **No stuck peer.** A write that has not completed after `SEND_TIMEOUT_S` (the device stopped reading: its
  TCP window is full) closes the connection and fails with `ConnectionClosed`; it never pins the lock, and
  the close itself is bounded by `CLOSE_TIMEOUT_S` (then the transport is dropped).
- **The live-turn guard.** Output of a reply turn goes out only while that turn is the live one
  (`go_live` / `end_turn` / `cancel_live`): an aborted turn can never leak a late frame, sentence or tool
  call. `CURRENT_TURN` tells the device-MCP sender on whose behalf a tool call is made.
- **`tts start` / `tts stop` pairing.** Every `tts start` gets exactly one `tts stop`, sent by whoever
  ends the turn first (it finished, it was cancelled, it failed). An `abort` with nothing to stop is still
  answered with a `tts stop` (a device that aborted from speaking waits for it, reference §8.2 and 78 #337).
- **Close codes with reasons** from `shared_protocol.constants`, logged once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging

from shared_protocol import audio, messages
from shared_protocol.constants import CLOSE_REASONS, CLOSE_SEND_TIMEOUT
from wren.session.services import Connection, ConnectionClosed

log = logging.getLogger(__name__)

SEND_TIMEOUT_S = 10.0  # a healthy device drains 1 s of audio in 1 s; 10 s of a full TCP window is a dead one
CLOSE_TIMEOUT_S = 2.0

# The reply turn (its id) whose task, and the agent/tool tasks it spawns, is running.
CURRENT_TURN: contextvars.ContextVar[int | None] = contextvars.ContextVar("wren_turn", default=None)


class Outbox:
    def __init__(self, conn: Connection, session_id: str, name: str) -> None:
        self._conn = conn
        self.session_id = session_id
        self.name = name
        self.protocol_version = 1  # binary framing of downlink audio, set at hello
        self._lock = asyncio.Lock()
        self._closed = False
        self.live_turn: int | None = None
        self._tts_open_for: int | None = None  # the turn whose `tts start` awaits its `tts stop`

    # ---- state ----------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed or self._conn.closed

    @property
    def speaking(self) -> bool:
        """A `tts start` is out and its `tts stop` is not: the device is in its speaking state."""
        return self._tts_open_for is not None

    def is_live(self, turn: int) -> bool:
        return turn == self.live_turn and not self.closed

    # ---- the write itself -----------------------------------------------------------------------

    async def _write(self, data: str | bytes) -> None:
        if self.closed:
            raise ConnectionClosed()
        try:
            async with asyncio.timeout(SEND_TIMEOUT_S):
                async with self._lock:
                    if self.closed:  # a write queued behind one that timed out: fail now, write nothing
                        raise ConnectionClosed()
                    if isinstance(data, str):
                        await self._conn.send_text(data)
                    else:
                        await self._conn.send_bytes(data)
        except TimeoutError:
            log.warning("%s: a write did not complete in %.0f s (the device stopped reading); closing",
                        self.name, SEND_TIMEOUT_S)
            self._closed = True
            await self._close_transport(CLOSE_SEND_TIMEOUT, CLOSE_REASONS[CLOSE_SEND_TIMEOUT])
            raise ConnectionClosed("send timeout") from None

    async def send(self, msg: dict) -> None:
        """A session-level message (hello reply, pong, timers); ConnectionClosed if the socket is gone."""
        await self._write(messages.encode(msg))

    # ---- turn output ----------------------------------------------------------------------------

    def go_live(self, turn: int) -> None:
        self.live_turn = turn

    def end_turn(self, turn: int) -> None:
        if self.live_turn == turn:
            self.live_turn = None

    async def send_for(self, turn: int, msg: dict) -> bool:
        """Send a message of `turn`, unless that turn is no longer the live one (then: False)."""
        if not self.is_live(turn):
            return False
        await self._write(messages.encode(msg))
        return True

    async def send_audio_for(self, turn: int, packet: bytes, timestamp_ms: int) -> bool:
        if not self.is_live(turn):
            return False
        await self._write(audio.pack(self.protocol_version, packet, timestamp_ms & 0xFFFFFFFF))
        return True

    async def tts_start(self, turn: int) -> bool:
        if not await self.send_for(turn, messages.tts_start(self.session_id)):
            return False
        self._tts_open_for = turn
        return True

    async def tts_stop(self, turn: int, why: str) -> bool:
        """The `tts stop` of `turn`, if its start is still open; True if this call sent it."""
        if self._tts_open_for != turn:
            return False
        self._tts_open_for = None
        await self._send_stop(why)
        return True

    async def cancel_live(self, why: str) -> bool:
        """The live turn ends now (abort, barge-in): nothing more of it goes out; True if a stop was sent."""
        turn, self.live_turn = self.live_turn, None
        return turn is not None and await self.tts_stop(turn, f"turn {turn} cancelled: {why}")

    async def answer_abort(self) -> None:
        """An abort that stopped nothing is answered anyway: the device may be waiting for `tts stop`."""
        await self._send_stop("abort")

    async def _send_stop(self, why: str) -> None:
        if self.closed:
            return
        log.debug("%s: tts stop (%s)", self.name, why)
        with contextlib.suppress(ConnectionClosed):
            await self._write(messages.encode(messages.tts_stop(self.session_id)))

    async def send_mcp(self, payload: dict) -> None:
        """Sender for the device MCP client: a tool call of a turn that is no longer live is never sent."""
        turn = CURRENT_TURN.get()
        if turn is not None and turn != self.live_turn:
            raise ConnectionClosed(f"turn {turn} was cancelled; device tool call not sent")
        await self._write(messages.encode(messages.mcp(payload, self.session_id)))

    # ---- closing --------------------------------------------------------------------------------

    async def close(self, code: int, detail: str = "") -> None:
        """Close the connection with `code` (shared_protocol.constants) and a reason the device can log."""
        if self._conn.closed:
            self._closed = True
            return
        meaning = CLOSE_REASONS.get(code, "")
        reason = detail or meaning
        log.info("%s: closing (%d %s)%s", self.name, code, meaning, f": {detail}" if detail else "")
        self._closed = True
        await self._close_transport(code, reason)

    async def _close_transport(self, code: int, reason: str) -> None:
        try:
            await asyncio.wait_for(self._conn.close(code, reason), CLOSE_TIMEOUT_S)
        except TimeoutError:
            log.debug("%s: close handshake timed out; transport dropped", self.name)
        except Exception as exc:  # a dying socket: nothing more to do
            log.debug("%s: close failed: %s", self.name, exc)

