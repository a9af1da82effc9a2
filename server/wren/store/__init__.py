"""Where Wren keeps what outlives a connection: chosen by `[store] url`.

- Empty (the default): SQLite files in the data dir, for one instance (wren.store.sqlite_sessions,
  wren.store.sqlite_devices; secrets in files next to them).
- `redis://…`: Redis or Valkey, shared by several instances (wren.store.redis_sessions,
  wren.store.redis_devices): sessions, history, engine state, timers, paired devices and secrets.

What each store promises is wren.store.records. This package imports only the configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from wren.config import Config, default_data_dir
from wren.store.records import DeviceRegistry, SessionStore, StoreUnreachable, redacted

SESSIONS_FILE = "sessions.sqlite3"


def open_session_store(config: Config) -> SessionStore:
    """The store of sessions and timers the configuration names (opened by the agent at start)."""
    if config.store.url:
        from wren.store.redis_sessions import RedisSessionStore

        return RedisSessionStore(config.store.url, key_prefix=config.store.key_prefix,
                                 history_max_messages=config.agent.history_max_messages,
                                 lease_s=config.store.lease_s)
    from wren.store.sqlite_sessions import SqliteSessionStore

    return SqliteSessionStore(data_dir(config) / SESSIONS_FILE, config.agent.history_max_messages)


def data_dir(config: Config) -> Path:
    """`[server] data_dir`, or the default one when a Config built by hand left it empty: never the
    working folder."""
    return Path(config.server.data_dir or default_data_dir()).expanduser()


def open_device_registry(config: Config) -> DeviceRegistry:
    """Paired devices and pairing requests, where the configuration keeps them."""
    if config.store.url:
        from wren.store.redis_devices import RedisDeviceRegistry

        return RedisDeviceRegistry(config.store.url, config.store.key_prefix)
    from wren.store.sqlite_devices import SqliteDeviceRegistry

    return SqliteDeviceRegistry(data_dir(config))


def pairing_secret(config: Config) -> str:
    """Pair mode's token-signing secret: `[auth] secret`, else the one the store keeps (made once)."""
    if config.auth.secret:
        return config.auth.secret
    from wren.store.sqlite_devices import load_or_create_secret, new_secret

    if config.store.url:
        return shared_value(config, "auth_secret", new_secret)[0]
    return load_or_create_secret(data_dir(config))


def describe(config: Config) -> str:
    """Where the store is, for logs and messages: the data dir, or the Redis URL without its password."""
    return redacted(config.store.url) if config.store.url else str(data_dir(config))


def unreachable_errors(config: Config) -> tuple[type[Exception], ...]:
    """What the configured store raises when it cannot be reached (for a clear message, not a trace)."""
    if not config.store.url:
        return (OSError, StoreUnreachable)
    import redis

    return (OSError, redis.RedisError, StoreUnreachable)


def shared_value(config: Config, name: str, make: Callable[[], str]) -> tuple[str, bool]:
    """A value all instances sharing the Redis store agree on (made by the first); and whether this call
    made it. Only for a configured `[store] url`."""
    from wren.store.redis_devices import shared_secret

    return shared_secret(config.store.url, config.store.key_prefix, name, make)


__all__ = ["DeviceRegistry", "SessionStore", "StoreUnreachable", "describe", "open_device_registry",
           "open_session_store", "pairing_secret", "shared_value", "unreachable_errors"]
