"""Paired devices, pairing requests and shared secrets in Redis (`[store] url`), for several instances.

The same rules as the SQLite registry (wren.store.sqlite_devices): a code per device id + client id while
it is valid (CODE_TTL_S), at most MAX_PENDING open requests (the oldest dropped first), tokens kept only
as their SHA-256. A device approved through instance A gets its token from B's OTA, and B admits it.

Two hashes under the key prefix: `devices:paired` (device id -> JSON) and `devices:pending` (code -> JSON).
Writes that read first (a new request, an approval, a revocation) are WATCH/MULTI transactions, retried
when another instance or `wren devices` changed the hash meanwhile. The calls are synchronous, like
SQLite's: a few small commands on a LAN, at OTA and WebSocket admission only.

`shared_secret` keeps the values every instance must agree on (pair mode's signing secret, the API key):
the first instance to start makes them (SET NX), the others read them.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from wren.store.records import (
    CODE_TTL_S,
    MAX_PENDING,
    PairedDevice,
    PairingRequest,
    StoreUnreachable,
    TokenSigner,
    approval,
    redacted,
    token_digest,
)

SOCKET_TIMEOUT_S = 5.0


def connect_sync(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, decode_responses=True, socket_timeout=SOCKET_TIMEOUT_S,
                                socket_connect_timeout=SOCKET_TIMEOUT_S)


def shared_secret(url: str, key_prefix: str, name: str, make: Callable[[], str]) -> tuple[str, bool]:
    """The value of `name` in the store, made by `make` if no instance has made it yet; and whether this
    call made it."""
    import redis

    client = connect_sync(url)
    try:
        key = f"{key_prefix}secret:{name}"
        created = bool(client.set(key, make(), nx=True))
        return str(client.get(key)), created
    except (OSError, redis.RedisError) as exc:
        raise StoreUnreachable(f"the store at {redacted(url)} cannot be reached: {exc}") from exc
    finally:
        client.close()


class RedisDeviceRegistry:
    def __init__(self, url: str, key_prefix: str = "wren:", clock: Callable[[], float] = time.time) -> None:
        self.path = url  # where it lives, for messages (`wren devices list` prints it)
        self._clock = clock
        self._r = connect_sync(url)
        self._paired = f"{key_prefix}devices:paired"
        self._pending = f"{key_prefix}devices:pending"

    def close(self) -> None:
        self._r.close()

    def _transaction(self, body: Callable[[Any], Any]) -> Any:
        """Run `body(pipe)` with both hashes watched: it reads through `pipe`, calls `pipe.multi()` and
        queues its writes; run again if another writer got in between."""
        import redis

        while True:
            with self._r.pipeline() as pipe:
                try:
                    pipe.watch(self._paired, self._pending)
                    result = body(pipe)
                    pipe.execute()
                    return result
                except redis.WatchError:
                    continue

    # ---- paired devices ----

    def paired(self, device_id: str) -> PairedDevice | None:
        raw = self._r.hget(self._paired, device_id)
        return PairedDevice(*json.loads(raw)) if raw else None

    def paired_devices(self) -> list[PairedDevice]:
        devices = [PairedDevice(*json.loads(raw)) for raw in self._r.hvals(self._paired)]
        return sorted(devices, key=lambda d: d.approved_at)

    def resign(self, device_id: str, signed_at: int, token: str) -> None:
        def body(pipe: Any) -> None:
            raw = pipe.hget(self._paired, device_id)
            pipe.multi()
            if raw:
                d = PairedDevice(*json.loads(raw))
                renewed = dataclasses.replace(d, signed_at=signed_at, token_sha256=token_digest(token))
                pipe.hset(self._paired, device_id, _encode(renewed))

        self._transaction(body)

    def revoke(self, device_id: str) -> bool:
        def body(pipe: Any) -> bool:
            paired = pipe.hexists(self._paired, device_id)
            codes = [r.code for r in _requests(pipe.hvals(self._pending)) if r.device_id == device_id]
            pipe.multi()
            pipe.hdel(self._paired, device_id)
            if codes:
                pipe.hdel(self._pending, *codes)
            return bool(paired or codes)

        return bool(self._transaction(body))

    # ---- pairing requests ----

    def request(self, device_id: str, client_id: str, remote: str) -> PairingRequest:
        def body(pipe: Any) -> PairingRequest:
            now = self._clock()
            everyone = _requests(pipe.hvals(self._pending))
            expired = [r.code for r in everyone if r.created_at < now - CODE_TTL_S]
            valid = sorted((r for r in everyone if r.code not in expired), key=lambda r: r.created_at)
            mine = next((r for r in valid if r.device_id == device_id and r.client_id == client_id), None)
            pipe.multi()
            if expired:
                pipe.hdel(self._pending, *expired)
            if mine is not None:
                return mine
            # A flood of fake devices pushes out the oldest request, not memory.
            dropped = [r.code for r in valid[: max(0, len(valid) - MAX_PENDING + 1)]]
            if dropped:
                pipe.hdel(self._pending, *dropped)
            taken = {r.code for r in valid}
            code = f"{secrets.randbelow(1_000_000):06d}"
            while code in taken:
                code = f"{secrets.randbelow(1_000_000):06d}"
            made = PairingRequest(code, device_id, client_id, remote[:64], now)
            pipe.hset(self._pending, code, _encode(made))
            return made

        return self._transaction(body)

    def pending(self) -> list[PairingRequest]:
        cutoff = self._clock() - CODE_TTL_S
        valid = [r for r in _requests(self._r.hvals(self._pending)) if r.created_at >= cutoff]
        return sorted(valid, key=lambda r: r.created_at)

    def is_pending(self, device_id: str, client_id: str) -> bool:
        return any(r.device_id == device_id and r.client_id == client_id for r in self.pending())

    def approve(self, code: str, sign: TokenSigner) -> PairedDevice | None:
        code = code.strip()
        device = approval(self.pending(), code, sign, self._clock())
        if device is None:
            return None

        def body(pipe: Any) -> PairedDevice | None:
            if not pipe.hexists(self._pending, code):
                pipe.multi()
                return None  # revoked or replaced meanwhile
            codes = [r.code for r in _requests(pipe.hvals(self._pending)) if r.device_id == device.device_id]
            pipe.multi()
            pipe.hset(self._paired, device.device_id, _encode(device))
            pipe.hdel(self._pending, *codes)
            return device

        return self._transaction(body)


def _encode(row: PairedDevice | PairingRequest) -> str:
    return json.dumps(dataclasses.astuple(row))


def _requests(raws: list[str]) -> list[PairingRequest]:
    return [PairingRequest(*json.loads(raw)) for raw in raws]
