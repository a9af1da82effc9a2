"""`[store]`: SQLite stays the default; a URL Wren cannot use is refused by name, and a Redis that cannot be
reached stops `wren serve` and `wren devices` with one line that says where (never the password)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from wren.config import Config, ConfigError, load_config
from wren.store import describe, open_session_store
from wren.store.sqlite_sessions import SqliteSessionStore

from tests.support.wren_process import REPO

UNREACHABLE = "redis://:hunter2@127.0.0.1:1/0"


def test_sqlite_in_the_data_dir_is_the_default(tmp_path: Path) -> None:
    config = load_config(env={"WREN_SERVER_DATA_DIR": str(tmp_path)})
    assert config.store.url == ""
    store = open_session_store(config)
    assert isinstance(store, SqliteSessionStore) and store.path == tmp_path / "sessions.sqlite3"


@pytest.mark.parametrize("url", ["http://redis:6379", "redis.lan:6379", "postgres://db/wren"])
def test_a_store_url_wren_cannot_use_is_refused_by_name(url: str) -> None:
    with pytest.raises(ConfigError, match=r"store\.url"):
        load_config(env={"WREN_STORE_URL": url})


def test_the_password_never_shows_where_the_store_is_named() -> None:
    config = Config()
    config.store.url = UNREACHABLE
    assert describe(config) == "redis://127.0.0.1:1/0"


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WREN_")}
    env.update(WREN_STORE_URL=UNREACHABLE, WREN_SERVER_DATA_DIR=str(tmp_path))
    return subprocess.run([sys.executable, "-m", "wren.cli", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=180)


def test_wren_devices_says_the_store_cannot_be_reached(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "devices", "list")
    assert done.returncode == 1
    assert "the store at redis://127.0.0.1:1/0 cannot be reached" in done.stderr
    assert "hunter2" not in done.stderr + done.stdout and "Traceback" not in done.stderr


def test_wren_serve_stops_with_one_line_when_the_store_cannot_be_reached(tmp_path: Path) -> None:
    done = run_cli(tmp_path, "serve", "--host", "127.0.0.1", "--port", "0")
    assert done.returncode == 2
    assert "wren serve: the store at redis://127.0.0.1:1/0 cannot be reached" in done.stderr
    assert "hunter2" not in done.stderr + done.stdout and "Traceback" not in done.stderr
