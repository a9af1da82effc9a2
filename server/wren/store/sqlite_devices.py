"""Paired devices and pairing requests (auth mode `pair`, the default): who may connect as which device.

An unknown device asking OTA gets a 6-digit code (it shows and speaks it, reference §6.3 `activation`);
the owner approves the code (`wren devices approve CODE`, or the console); from then on OTA hands that
device id + client id pair its token, and only a WebSocket with that token is admitted as that device
id. `wren devices revoke ID` ends it: the token stops working at once, whatever its expiry.

Stored in `<data_dir>/devices.sqlite3` (0600), shared by the server and the `wren devices` command (two
processes; SQLite serialises them). Tokens are not stored: a paired row keeps the signing time, so the
server can sign the same token again for OTA, and the SHA-256 of the token, which the WebSocket check
compares, so a copy of the file without the secret lets nobody in. A few rows: each query is a fraction of
a millisecond, done inline.

Bounded: at most `MAX_PENDING` open requests (the oldest is dropped first), each valid `CODE_TTL_S`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from wren.store.records import (
    CODE_TTL_S,
    MAX_PENDING,
    PairedDevice,
    PairingRequest,
    TokenSigner,
    approval,
    token_digest,
)

FILE_NAME = "devices.sqlite3"
SECRET_FILE = "auth_secret"
PAIRED = "device_id, client_id, signed_at, token_sha256, approved_at"
PENDING = "code, device_id, client_id, remote, created_at"
SCHEMA = """
CREATE TABLE IF NOT EXISTS paired (
    device_id TEXT PRIMARY KEY, client_id TEXT NOT NULL, signed_at INTEGER NOT NULL,
    token_sha256 TEXT NOT NULL, approved_at REAL NOT NULL, name TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS pending (
    code TEXT PRIMARY KEY, device_id TEXT NOT NULL, client_id TEXT NOT NULL, remote TEXT NOT NULL,
    created_at REAL NOT NULL, UNIQUE (device_id, client_id));
"""


def _private_file(path: Path) -> None:
    """Create `path` 0600 before anyone writes to it (SQLite's -journal files take the same mode)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def new_secret() -> str:
    return secrets.token_hex(32)


def load_or_create_secret(data_dir: Path) -> str:
    """The signing secret of pair mode when `[auth] secret` is not set: 32 random bytes, made at the first
    start into the data dir (0600) and kept, so tokens survive restarts."""
    path = data_dir / SECRET_FILE
    if not path.exists():
        _private_file(path)
        with open(path, "r+", encoding="ascii") as f:
            if not f.read().strip():
                f.write(new_secret() + "\n")
    return path.read_text(encoding="ascii").strip()


class SqliteDeviceRegistry:
    def __init__(self, data_dir: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._clock = clock
        self._lock = threading.Lock()
        _private_file(self.path)
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=5.0)
        self._conn.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, across processes too (the `wren devices` command writes the same file)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _rows(self, query: str, *args: object) -> list[tuple]:
        with self._lock:
            return self._conn.execute(query, args).fetchall()

    # ---- paired devices ----

    def paired(self, device_id: str) -> PairedDevice | None:
        rows = self._rows(f"SELECT {PAIRED} FROM paired WHERE device_id = ?", device_id)
        return PairedDevice(*rows[0]) if rows else None

    def paired_devices(self) -> list[PairedDevice]:
        return [PairedDevice(*r) for r in self._rows(f"SELECT {PAIRED} FROM paired ORDER BY approved_at")]

    def resign(self, device_id: str, signed_at: int, token: str) -> None:
        """A renewed token for a paired device (OTA, past half its lifetime)."""
        self._rows("UPDATE paired SET signed_at = ?, token_sha256 = ? WHERE device_id = ?",
                   signed_at, token_digest(token), device_id)

    def revoke(self, device_id: str) -> bool:
        with self._transaction():
            paired = self._conn.execute("DELETE FROM paired WHERE device_id = ?", (device_id,)).rowcount
            waiting = self._conn.execute("DELETE FROM pending WHERE device_id = ?", (device_id,)).rowcount
        return bool(paired or waiting)

    # ---- pairing requests ----

    def request(self, device_id: str, client_id: str, remote: str) -> PairingRequest:
        """The open request for this device id + client id (the same code while it is valid), or a new
        one with a fresh code."""
        now = self._clock()
        with self._transaction():
            self._conn.execute("DELETE FROM pending WHERE created_at < ?", (now - CODE_TTL_S,))
            row = self._conn.execute(f"SELECT {PENDING} FROM pending WHERE device_id = ? AND client_id = ?",
                                     (device_id, client_id)).fetchone()
            if row is not None:
                return PairingRequest(*row)
            count = self._conn.execute("SELECT COUNT(*) FROM pending").fetchone()[0]
            if count >= MAX_PENDING:  # a flood of fake devices pushes out the oldest request, not memory
                self._conn.execute("DELETE FROM pending WHERE code IN (SELECT code FROM pending "
                                   "ORDER BY created_at LIMIT ?)", (count - MAX_PENDING + 1,))
            while True:
                code = f"{secrets.randbelow(1_000_000):06d}"
                if self._conn.execute("SELECT 1 FROM pending WHERE code = ?", (code,)).fetchone() is None:
                    break
            self._conn.execute("INSERT INTO pending VALUES (?, ?, ?, ?, ?)",
                               (code, device_id, client_id, remote[:64], now))
            return PairingRequest(code, device_id, client_id, remote[:64], now)

    def pending(self) -> list[PairingRequest]:
        cutoff = self._clock() - CODE_TTL_S
        return [PairingRequest(*r) for r in self._rows(
            f"SELECT {PENDING} FROM pending WHERE created_at >= ? ORDER BY created_at", cutoff)]

    def is_pending(self, device_id: str, client_id: str) -> bool:
        return any(r.device_id == device_id and r.client_id == client_id for r in self.pending())

    def approve(self, code: str, sign: TokenSigner) -> PairedDevice | None:
        """Pair the device behind `code` (it replaces an earlier pairing of the same device id); None if
        no valid request has that code."""
        device = approval(self.pending(), code, sign, self._clock())
        if device is None:
            return None
        with self._transaction():
            self._conn.execute(f"INSERT OR REPLACE INTO paired ({PAIRED}) VALUES (?, ?, ?, ?, ?)",
                               (device.device_id, device.client_id, device.signed_at, device.token_sha256,
                                device.approved_at))
            self._conn.execute("DELETE FROM pending WHERE device_id = ?", (device.device_id,))
        return device
