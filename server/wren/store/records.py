"""What the stores keep, and what every store promises (the SQLite ones and the Redis ones alike).

Two stores, each with two implementations chosen by `[store] url` (wren.store.open_*):
- `SessionStore`: per session key its history, its engine states, and its timers; and the lease that makes a
  turn the only one on its key, across every instance sharing the store.
- `DeviceRegistry`: paired devices and open pairing requests (auth mode `pair`).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

DELIVERED_TIMERS_KEPT_S = 7 * 24 * 3600  # spoken timers stay a week (for inspection), then are pruned
CODE_TTL_S = 600.0  # a pairing code is valid this long
MAX_PENDING = 32  # open pairing requests at most; the oldest is dropped first
TokenSigner = Callable[[str, str, int], str]  # (client_id, device_id, signed at) -> token


class StoreUnreachable(Exception):
    """The configured store cannot be reached (at start): the message says where and why."""


def redacted(url: str) -> str:
    """A store URL without its password, for messages and logs."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass
class HistoryRow:
    role: str  # "user" or "assistant"
    content: str
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. {"interrupted": true}


@dataclass
class TimerRow:
    """A timer, alarm or reminder of one session (`kind`: timer, alarm, reminder); times in epoch seconds."""

    id: int
    session_key: str
    kind: str
    label: str
    due_at: float
    created_at: float
    delivered: bool = False


@dataclass(frozen=True)
class PairedDevice:
    device_id: str
    client_id: str
    signed_at: int
    token_sha256: str
    approved_at: float


@dataclass(frozen=True)
class PairingRequest:
    code: str
    device_id: str
    client_id: str
    remote: str
    created_at: float


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def approval(pending: list[PairingRequest], code: str, sign: TokenSigner, now: float) -> PairedDevice | None:
    """The pairing that approving `code` makes, its token signed now; None if no valid request has it.
    (Both registries then store it and drop the device's requests, each in its own transaction.)"""
    code = code.strip()
    request = next((r for r in pending if r.code == code), None)
    if request is None:
        return None
    token = sign(request.client_id, request.device_id, int(now))
    return PairedDevice(request.device_id, request.client_id, int(now), token_digest(token), now)


def trim_to_exchange(history: list[HistoryRow]) -> list[HistoryRow]:
    """Kept history never starts mid-exchange after a trim: leading assistant rows are dropped."""
    while history and history[0].role != "user":
        history.pop(0)
    return history


class SessionStore(Protocol):
    # True when other instances use the same store (Redis): timers are then re-read and claimed before
    # they are spoken, so each fires once across the cluster.
    shared: bool

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def load(self, session_key: str, engine: str) -> tuple[list[HistoryRow], dict[str, Any]]:
        """The session's kept history (oldest first, starting at a user row) and this engine's state."""
        ...

    async def commit_turn(
        self, session_key: str, engine: str, rows: list[HistoryRow], state: dict[str, Any] | None
    ) -> list[int]:
        """Append the turn's rows, save the engine state and trim, all at once; the rows' ids."""
        ...

    async def amend_reply(self, session_key: str, row_id: int, spoken_text: str) -> None:
        """Replace a recorded answer by what was actually spoken (barge-in during playback)."""
        ...

    async def message_count(self, session_key: str) -> int: ...

    def turn_lease(self, session_key: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Held for a whole turn: no other instance runs a turn on this key meanwhile (a no-op when the
        store is not shared: the agent's own lock already serialises one process)."""
        ...

    async def add_timer(self, timer: TimerRow) -> int:
        """Persist a new timer (its `id` is ignored); returns the id it was given."""
        ...

    async def undelivered_timers(self) -> list[TimerRow]:
        """Every timer not yet spoken, soonest first (old spoken ones are pruned on the way)."""
        ...

    async def timers_version(self) -> int:
        """A number that changes whenever any instance adds, delivers or deletes a timer."""
        ...

    async def claim_timer(self, timer_id: int, lease_s: float) -> bool:
        """Whether this instance may speak the timer now: it is still undelivered and nobody else holds
        it. The claim lapses after `lease_s`, or at `release_timer`."""
        ...

    async def release_timer(self, timer_id: int) -> None: ...

    async def mark_timer_delivered(self, timer_id: int) -> None: ...

    async def delete_timer(self, timer_id: int) -> None: ...


class DeviceRegistry(Protocol):
    def close(self) -> None: ...

    def paired(self, device_id: str) -> PairedDevice | None: ...

    def paired_devices(self) -> list[PairedDevice]: ...

    def resign(self, device_id: str, signed_at: int, token: str) -> None:
        """A renewed token for a paired device (OTA, past half its lifetime)."""
        ...

    def revoke(self, device_id: str) -> bool: ...

    def request(self, device_id: str, client_id: str, remote: str) -> PairingRequest:
        """The open request for this device id + client id (the same code while it is valid), or a new
        one with a fresh code."""
        ...

    def pending(self) -> list[PairingRequest]: ...

    def is_pending(self, device_id: str, client_id: str) -> bool: ...

    def approve(self, code: str, sign: TokenSigner) -> PairedDevice | None:
        """Pair the device behind `code` (it replaces an earlier pairing of the same device id); None if
        no valid request has that code."""
        ...
