"""Sessions, history, engine state and timers in Redis or Valkey (`[store] url`), shared by instances.

The same semantics as the SQLite store (wren.store.sqlite_sessions), for several `wren serve` processes:
- A turn's rows, engine state and trim are written in one MULTI/EXEC transaction: another instance sees
  the whole turn or none of it. Row and timer ids come from one counter (`<prefix>ids`).
- One turn at a time per session key across instances: `turn_lease` holds `<prefix>turn:<key>` (SET NX
  with a lease of `[store] lease_s`, renewed at a third of it while the turn runs, released only by its
  holder). A crashed instance's keys are free again when its lease runs out. A waiter polls, from 5 ms
  doubling to 100 ms: contention is rare, since a device talks to one instance at a time.
- Timers: one JSON value per timer, and a sorted set of the undelivered ones by due time. An instance
  claims a timer (`claim_timer`: still undelivered and nobody else's claim) before speaking it, so it
  fires once across the cluster; `timers_version` changes with every add, delivery and delete, so the
  other instances know when to re-read them. A spoken timer is kept a week, then Redis expires it.

Keys (all under `[store] key_prefix`, default `wren:`): `history:<key>` (a list of JSON rows, trimmed to
`history_max_messages`), `state:<key>` (a hash engine -> JSON), `turn:<key>`, `timer:<id>`,
`timer-claim:<id>`, `timers:pending`, `timers:version`, `ids`. Redis Cluster (sharded) is not supported:
one primary, with replicas or Sentinel if wanted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator
from typing import Any

from wren.store.records import (
    DELIVERED_TIMERS_KEPT_S,
    HistoryRow,
    StoreUnreachable,
    TimerRow,
    redacted,
    trim_to_exchange,
)
from wren.store.redis_client import connect as cancellable_client

log = logging.getLogger(__name__)

LEASE_POLL_FIRST_S = 0.005
LEASE_POLL_MAX_S = 0.1
SOCKET_TIMEOUT_S = 5.0

# Atomic steps (Lua runs as one command on the server).
_RENEW = ("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end "
          "return 0")
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"
_AMEND = """
local rows = redis.call('LRANGE', KEYS[1], 0, -1)
for i, raw in ipairs(rows) do
  local row = cjson.decode(raw)
  if tonumber(row.id) == tonumber(ARGV[1]) then
    row.content = ARGV[2]
    if type(row.meta) ~= 'table' then row.meta = {} end
    row.meta.interrupted = true
    redis.call('LSET', KEYS[1], i - 1, cjson.encode(row))
    return 1
  end
end
return 0
"""
_CLAIM = """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then return 1 end
return 0
"""
_DELIVERED = """
redis.call('ZREM', KEYS[1], ARGV[1])
local raw = redis.call('GET', KEYS[2])
if raw then
  local timer = cjson.decode(raw)
  timer.delivered = true
  redis.call('SET', KEYS[2], cjson.encode(timer), 'EX', ARGV[2])
end
redis.call('DEL', KEYS[3])
return redis.call('INCR', KEYS[4])
"""


def connect(url: str) -> Any:
    """An asyncio client for `url` (decoded strings, bounded socket waits, cancellation honoured)."""
    return cancellable_client(url, socket_timeout_s=SOCKET_TIMEOUT_S)


class RedisSessionStore:
    shared = True

    def __init__(self, url: str, *, key_prefix: str = "wren:", history_max_messages: int = 40,
                 lease_s: float = 15.0) -> None:
        self.url = url
        self.prefix = key_prefix
        self.history_max_messages = max(2, history_max_messages)
        self.lease_ms = int(lease_s * 1000)
        self.owner = secrets.token_hex(8)  # this instance, in its leases and claims
        self._redis: Any = None

    @property
    def _r(self) -> Any:
        if self._redis is None:
            raise RuntimeError("session store is not open")
        return self._redis

    def _key(self, *parts: object) -> str:
        return self.prefix + ":".join(str(p) for p in parts)

    async def open(self) -> None:
        if self._redis is None:
            import redis

            client = connect(self.url)
            try:
                await client.ping()  # a wrong URL or a stopped server fails the start, with its reason
            except (OSError, redis.RedisError) as exc:
                await client.aclose()
                raise StoreUnreachable(f"the store at {redacted(self.url)} cannot be reached: {exc}") from exc
            self._redis = client

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    async def _new_ids(self, count: int) -> list[int]:
        last = int(await self._r.incrby(self._key("ids"), count))
        return list(range(last - count + 1, last + 1))

    # ---- history and engine state ----------------------------------------------------------------

    async def load(self, session_key: str, engine: str) -> tuple[list[HistoryRow], dict[str, Any]]:
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.lrange(self._key("history", session_key), -self.history_max_messages, -1)
            pipe.hget(self._key("state", session_key), engine)
            raw_rows, raw_state = await pipe.execute()
        history = []
        for raw in raw_rows:
            row = json.loads(raw)
            meta = row.get("meta")
            meta = meta if isinstance(meta, dict) else {}
            history.append(HistoryRow(str(row["role"]), str(row["content"]), meta))
        state = json.loads(raw_state) if raw_state else {}
        return trim_to_exchange(history), state if isinstance(state, dict) else {}

    async def commit_turn(
        self, session_key: str, engine: str, rows: list[HistoryRow], state: dict[str, Any] | None
    ) -> list[int]:
        ids = await self._new_ids(len(rows)) if rows else []
        now = time.time()
        history = self._key("history", session_key)
        async with self._r.pipeline(transaction=True) as pipe:
            for row_id, row in zip(ids, rows, strict=True):
                pipe.rpush(history, json.dumps({"id": row_id, "role": row.role, "content": row.content,
                                                "meta": row.meta, "at": now}))
            pipe.ltrim(history, -self.history_max_messages, -1)
            if state is not None:
                pipe.hset(self._key("state", session_key), engine, json.dumps(state))
            await pipe.execute()
        return ids

    async def amend_reply(self, session_key: str, row_id: int, spoken_text: str) -> None:
        await self._r.eval(_AMEND, 1, self._key("history", session_key), row_id, spoken_text)

    async def message_count(self, session_key: str) -> int:
        return int(await self._r.llen(self._key("history", session_key)))

    # ---- one turn at a time per key, across instances ---------------------------------------------

    @contextlib.asynccontextmanager
    async def turn_lease(self, session_key: str) -> AsyncIterator[None]:
        key = self._key("turn", session_key)
        token = f"{self.owner}:{secrets.token_hex(4)}"
        pause = LEASE_POLL_FIRST_S
        while not await self._r.set(key, token, nx=True, px=self.lease_ms):
            await asyncio.sleep(pause)
            pause = min(pause * 2, LEASE_POLL_MAX_S)
        renewer = asyncio.get_running_loop().create_task(self._renew(key, token), name="wren-lease")
        try:
            yield
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
            try:
                await self._r.eval(_RELEASE, 1, key, token)
            except Exception as exc:  # the lease runs out by itself; the turn's outcome stands
                log.warning("store: could not release the turn lease of %s: %s", session_key, exc)

    async def _renew(self, key: str, token: str) -> None:
        while True:
            await asyncio.sleep(self.lease_ms / 3000)
            try:
                if not await self._r.eval(_RENEW, 1, key, token, self.lease_ms):
                    log.warning("store: turn lease %s was lost (Redis restarted, or the turn outlived it)",
                                key)
                    return
            except Exception as exc:
                log.warning("store: renewing turn lease %s failed: %s", key, exc)

    # ---- timers ------------------------------------------------------------------------------------

    async def add_timer(self, timer: TimerRow) -> int:
        (timer_id,) = await self._new_ids(1)
        body = {"id": timer_id, "session_key": timer.session_key, "kind": timer.kind, "label": timer.label,
                "due_at": timer.due_at, "created_at": timer.created_at, "delivered": False}
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.set(self._key("timer", timer_id), json.dumps(body))
            pipe.zadd(self._key("timers", "pending"), {str(timer_id): timer.due_at})
            pipe.incr(self._key("timers", "version"))
            await pipe.execute()
        return timer_id

    async def undelivered_timers(self) -> list[TimerRow]:
        ids = await self._r.zrange(self._key("timers", "pending"), 0, -1)
        if not ids:
            return []
        bodies = await self._r.mget([self._key("timer", i) for i in ids])
        rows = []
        for raw in bodies:
            if raw:
                t = json.loads(raw)
                rows.append(TimerRow(int(t["id"]), t["session_key"], t["kind"], t.get("label", ""),
                                     float(t["due_at"]), float(t["created_at"])))
        return sorted(rows, key=lambda r: (r.due_at, r.id))

    async def timers_version(self) -> int:
        return int(await self._r.get(self._key("timers", "version")) or 0)

    async def claim_timer(self, timer_id: int, lease_s: float) -> bool:
        return bool(await self._r.eval(_CLAIM, 2, self._key("timers", "pending"),
                                       self._key("timer-claim", timer_id), timer_id, self.owner,
                                       int(lease_s * 1000)))

    async def release_timer(self, timer_id: int) -> None:
        await self._r.eval(_RELEASE, 1, self._key("timer-claim", timer_id), self.owner)

    async def mark_timer_delivered(self, timer_id: int) -> None:
        await self._r.eval(_DELIVERED, 4, self._key("timers", "pending"), self._key("timer", timer_id),
                           self._key("timer-claim", timer_id), self._key("timers", "version"), timer_id,
                           DELIVERED_TIMERS_KEPT_S)

    async def delete_timer(self, timer_id: int) -> None:
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.zrem(self._key("timers", "pending"), str(timer_id))
            pipe.delete(self._key("timer", timer_id), self._key("timer-claim", timer_id))
            pipe.incr(self._key("timers", "version"))
            await pipe.execute()
