"""A real Wren server on 127.0.0.1 (ephemeral port) for the server tests.

The server runs in its own thread and event loop, so any test (sync or async, any loop scope) talks
to it over real sockets exactly as a device would. Speech models load once per test session; each
module gets its own server (and its own data dir) and always stops it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from wren.app import WrenServer
from wren.config import Config


class ServerThread:
    def __init__(self, config: Config, speech: Any) -> None:
        self.config = config
        self.speech = speech
        self.server: WrenServer | None = None
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._thread = threading.Thread(target=self.loop.run_forever, name="wren-test-server", daemon=True)

    def start(self) -> ServerThread:
        self._thread.start()
        self.server = WrenServer(self.config, speech=self.speech)
        self.port = self.call(self.server.start("127.0.0.1", 0), timeout=60)
        return self

    def call(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        try:
            if self.server is not None:
                self.call(self.server.stop(), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{self.config.server.websocket_path}"

    @property
    def sessions(self) -> set[Any]:
        assert self.server is not None
        return self.server.sessions


def make_config(tmp_path: Path, **sections: dict[str, Any]) -> Config:
    config = Config()
    config.server.host = "127.0.0.1"
    config.server.port = 0
    config.server.data_dir = str(tmp_path)
    config.auth.mode = "open"  # the tests of pairing and tokens ask for their mode (auth={...})
    # "One moment." comes only when a reply's first audio is late, i.e. when the box is busy (the suite runs
    # on several workers): a reply's words must not depend on that. tests/server/test_hold_phrase.py asks
    # for it (agent={"hold_phrase_after_ms": ...}).
    config.agent.hold_phrase_after_ms = 0
    for section, values in sections.items():
        for key, value in values.items():
            assert hasattr(getattr(config, section), key), f"{section}.{key}"
            setattr(getattr(config, section), key, value)
    return config


@pytest.fixture(scope="session")
def speech() -> Any:
    from wren.speech import SpeechStack

    config = Config()
    # The reply audio is recognised again by pocketsphinx: a voice without sampling noise makes that
    # check the same on every run (with noise, "it's" was missed in about one synthesis out of twelve).
    config.tts.natural_variation = False
    return SpeechStack.load(config)


@pytest.fixture(scope="module")
def start_server(
    speech: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., ServerThread]]:
    """Factory: `start_server(server={...}, auth={...})`; every server started is stopped after the module."""
    started: list[ServerThread] = []

    def start(**sections: dict[str, Any]) -> ServerThread:
        config = make_config(tmp_path_factory.mktemp("wren-data"), **sections)
        server = ServerThread(config, speech).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def server(start_server: Callable[..., ServerThread]) -> ServerThread:
    return start_server()
