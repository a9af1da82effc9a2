"""SQLite persistence of each session's history and engine state.

One database file (`<data_dir>/sessions.sqlite3`) in WAL mode. A whole turn (user rows, assistant
row, engine state, trim) is written in ONE transaction, so a crash mid-write loses nothing that was
already committed and never leaves half a turn behind. SQLite work runs on a single worker thread,
which keeps the event loop free and serialises access to the one connection.

Trim policy: after each turn only the newest `history_max_messages` rows of that session are kept
(older rows are deleted in the same transaction). Engine state (e.g. the user's name, the OVOS
session) is stored separately and is never trimmed, so facts outlive the trimmed transcript.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from wren.store.records import DELIVERED_TIMERS_KEPT_S, HistoryRow, TimerRow, trim_to_exchange

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    created_at REAL NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages (session_key, id);
CREATE TABLE IF NOT EXISTS engine_state (
    session_key TEXT NOT NULL,
    engine TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (session_key, engine)
);
CREATE TABLE IF NOT EXISTS timers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key TEXT NOT NULL,
    kind TEXT NOT NULL,
    label TEXT NOT NULL DEFAULT '',
    due_at REAL NOT NULL,
    created_at REAL NOT NULL,
    delivered INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS timers_pending ON timers (delivered, due_at);
"""
_INSERT_SQL = "INSERT INTO messages (session_key, role, content, created_at, meta) VALUES (?, ?, ?, ?, ?)"
_AMEND_SQL = (
    "UPDATE messages SET content = ?, meta = json_set(meta, '$.interrupted', json('true')) "
    "WHERE id = ? AND session_key = ?"
)


class SqliteSessionStore:
    """One instance's store (`[store] url` empty): see the module doc."""

    shared = False  # one process: its own lock serialises turns, its timers are its own

    def __init__(self, path: str | Path, history_max_messages: int = 40) -> None:
        self.path = Path(path)
        self.history_max_messages = max(2, history_max_messages)
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    async def _run(self, fn: Any, *args: Any) -> Any:
        if self._executor is None:
            raise RuntimeError("session store is not open")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def open(self) -> None:
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wren-sessions")
        await self._run(self._open_sync)

    def _open_sync(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Private from the first write: SQLite gives the -wal and -shm files the database file's mode, so
        # the file is created 0600 before SQLite opens it (a chmod afterwards would leave a window).
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")  # a committed turn survives power loss, not just a crash
        conn.executescript(SCHEMA)
        with contextlib.suppress(OSError):
            os.chmod(self.path, 0o600)  # conversations are private
        self._conn = conn

    async def close(self) -> None:
        if self._executor is None:
            return
        await self._run(self._close_sync)
        self._executor.shutdown(wait=True)
        self._executor = None

    def _close_sync(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def load(self, session_key: str, engine: str) -> tuple[list[HistoryRow], dict[str, Any]]:
        """The session's kept history (oldest first, starting at a user row) and this engine's state."""
        return await self._run(self._load_sync, session_key, engine)

    def _load_sync(self, session_key: str, engine: str) -> tuple[list[HistoryRow], dict[str, Any]]:
        assert self._conn is not None
        rows = self._conn.execute(
            "SELECT role, content, meta FROM messages WHERE session_key = ? ORDER BY id DESC LIMIT ?",
            (session_key, self.history_max_messages),
        ).fetchall()
        history = [
            HistoryRow(role, content, json.loads(meta or "{}")) for role, content, meta in reversed(rows)
        ]
        trim_to_exchange(history)
        found = self._conn.execute(
            "SELECT state FROM engine_state WHERE session_key = ? AND engine = ?", (session_key, engine)
        ).fetchone()
        state = json.loads(found[0]) if found else {}
        return history, state if isinstance(state, dict) else {}

    async def commit_turn(
        self, session_key: str, engine: str, rows: list[HistoryRow], state: dict[str, Any] | None
    ) -> list[int]:
        """Append the turn's rows, save the engine state and trim, all in one transaction; row ids."""
        return await self._run(self._commit_sync, session_key, engine, rows, state)

    async def amend_reply(self, session_key: str, row_id: int, spoken_text: str) -> None:
        """Replace a recorded answer by what was actually spoken (barge-in during playback)."""
        await self._run(self._execute_sync, _AMEND_SQL, (spoken_text, row_id, session_key))

    @contextlib.asynccontextmanager
    async def turn_lease(self, session_key: str) -> AsyncIterator[None]:
        yield  # one process: the agent's lock per key is the whole story

    def _commit_sync(
        self, session_key: str, engine: str, rows: list[HistoryRow], state: dict[str, Any] | None
    ) -> list[int]:
        assert self._conn is not None
        now = time.time()
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            ids = [
                conn.execute(_INSERT_SQL, (session_key, r.role, r.content, now, json.dumps(r.meta))).lastrowid
                or 0
                for r in rows
            ]
            if state is not None:
                conn.execute(
                    "INSERT INTO engine_state (session_key, engine, state, updated_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (session_key, engine) DO UPDATE SET state = excluded.state, "
                    "updated_at = excluded.updated_at",
                    (session_key, engine, json.dumps(state), now),
                )
            conn.execute(
                "DELETE FROM messages WHERE session_key = ? AND id NOT IN "
                "(SELECT id FROM messages WHERE session_key = ? ORDER BY id DESC LIMIT ?)",
                (session_key, session_key, self.history_max_messages),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return ids

    async def message_count(self, session_key: str) -> int:
        return await self._run(
            lambda: self._conn.execute(  # type: ignore[union-attr]
                "SELECT COUNT(*) FROM messages WHERE session_key = ?", (session_key,)
            ).fetchone()[0]
        )

    # ---- timers (wren.agent.timers) ------------------------------------------------------------------

    async def add_timer(self, timer: TimerRow) -> int:
        """Persist a new timer (its `id` is ignored); returns the id it was given."""
        return await self._run(self._add_timer_sync, timer)

    def _add_timer_sync(self, t: TimerRow) -> int:
        assert self._conn is not None
        cursor = self._conn.execute(
            "INSERT INTO timers (session_key, kind, label, due_at, created_at) VALUES (?, ?, ?, ?, ?)",
            (t.session_key, t.kind, t.label, t.due_at, t.created_at),
        )
        return int(cursor.lastrowid or 0)

    async def undelivered_timers(self) -> list[TimerRow]:
        """Every timer not yet spoken, soonest first (old spoken ones are pruned on the way)."""
        return await self._run(self._undelivered_sync)

    def _undelivered_sync(self) -> list[TimerRow]:
        assert self._conn is not None
        self._conn.execute(
            "DELETE FROM timers WHERE delivered = 1 AND due_at < ?", (time.time() - DELIVERED_TIMERS_KEPT_S,)
        )
        rows = self._conn.execute(
            "SELECT id, session_key, kind, label, due_at, created_at FROM timers WHERE delivered = 0 "
            "ORDER BY due_at, id"
        ).fetchall()
        return [TimerRow(*row) for row in rows]

    async def timers_version(self) -> int:
        return 0  # nobody else changes them

    async def claim_timer(self, timer_id: int, lease_s: float) -> bool:
        """Still undelivered (no other instance could be speaking it: there is none)."""
        return await self._run(
            lambda: self._conn.execute(  # type: ignore[union-attr]
                "SELECT 1 FROM timers WHERE id = ? AND delivered = 0", (timer_id,)
            ).fetchone() is not None
        )

    async def release_timer(self, timer_id: int) -> None:
        return None

    async def mark_timer_delivered(self, timer_id: int) -> None:
        await self._run(self._execute_sync, "UPDATE timers SET delivered = 1 WHERE id = ?", (timer_id,))

    async def delete_timer(self, timer_id: int) -> None:
        await self._run(self._execute_sync, "DELETE FROM timers WHERE id = ?", (timer_id,))

    def _execute_sync(self, sql: str, args: tuple[Any, ...]) -> None:
        assert self._conn is not None
        self._conn.execute(sql, args)
