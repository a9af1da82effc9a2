"""One real redis-server for the store tests of a module (flushed between tests), and both session stores
behind one fixture, so that each promise of wren.store.records is checked against SQLite and Redis alike."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
from wren.store.records import SessionStore
from wren.store.redis_sessions import RedisSessionStore
from wren.store.sqlite_sessions import SqliteSessionStore

from tests.support.redis_server import redis_server


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def clean_redis(redis_url: str) -> str:
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    return redis_url


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    if request.param == "sqlite":
        opened: SessionStore = SqliteSessionStore(tmp_path / "sessions.sqlite3", history_max_messages=6)
    else:
        opened = RedisSessionStore(request.getfixturevalue("clean_redis"), history_max_messages=6)
    await opened.open()
    yield opened
    await opened.close()
