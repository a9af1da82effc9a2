"""Helpers for driving the real MicroPython unix port (and the firmware under it) from pytest."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MICROPYTHON = REPO / ".venv" / "bin" / "micropython"
FIRMWARE = REPO / "firmware"
SCRIPTS = Path(__file__).parent / "mpy"
# App, host hal (machine/network stand-ins), shared_protocol (repo root) and the frozen stdlib.
MICROPYPATH = f"{FIRMWARE}:{FIRMWARE / 'hal' / 'host'}:{REPO}:.frozen"
HEAP = "160wk"  # 160 K words: the 32-bit-equivalent budget, scaled by pointer width on the host
# The Wren build (`make firmware-host`): the unix port with the opus module and the app frozen in. It runs
# with only its frozen modules on the path (`micropython -m main` from a scratch dir, as `make sim
# CODEC=opus` does); the `opus_build` fixture makes sure it is built and current.
OPUS_MICROPYTHON = REPO / ".cache" / "firmware-host" / "micropython"
FROZEN_ONLY = ".frozen"


class MpyProcess:
    """A running micropython whose stdout lines are collected as they arrive."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._new = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))
            self._new.set()
        self._new.set()

    async def wait_for(self, pattern: str, timeout: float = 20.0, start: int = 0) -> re.Match[str]:
        """First output line (from index `start`) matching `pattern`; fails with the output so far."""
        rx = re.compile(pattern)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen = start
        while True:
            for i in range(seen, len(self.lines)):
                m = rx.search(self.lines[i])
                if m:
                    return m
            seen = len(self.lines)
            if self._reader.done():
                raise AssertionError(f"micropython exited before {pattern!r}:\n" + self.output())
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {pattern!r}:\n" + self.output())
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), left)

    async def finish(self, timeout: float = 30.0) -> int:
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            raise AssertionError("micropython did not exit; output:\n" + self.output()) from None
        await self._reader
        return self.proc.returncode

    async def wait_for_count(self, pattern: str, count: int, timeout: float = 20.0) -> None:
        """Wait until `count` output lines match `pattern` (the firmware logs after it sends)."""
        start = 0
        for _ in range(count):
            await self.wait_for(pattern, timeout, start)
            start = next(i for i in range(start, len(self.lines)) if re.search(pattern, self.lines[i])) + 1

    async def until(self, event: asyncio.Event, timeout: float = 30.0) -> None:
        """Wait for a test-side event; on timeout fail with the firmware's output."""
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            raise AssertionError("timed out; firmware output:\n" + self.output()) from None

    def output(self) -> str:
        return "\n".join(self.lines)

    def count(self, pattern: str) -> int:
        rx = re.compile(pattern)
        return sum(1 for line in self.lines if rx.search(line))


@contextlib.asynccontextmanager
async def micropython(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    heap: str = HEAP,
    stdin: bool = False,
    binary: Path = MICROPYTHON,
    path: str = MICROPYPATH,
) -> AsyncIterator[MpyProcess]:
    """Run a MicroPython binary (default: the stock one, app from source); always killed on the way out."""
    full_env = {"PATH": os.environ.get("PATH", ""), "MICROPYPATH": path, **(env or {})}
    proc = await asyncio.create_subprocess_exec(
        str(binary),
        "-X",
        f"heapsize={heap}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        env=full_env,
        cwd=str(cwd) if cwd else None,
    )
    mp = MpyProcess(proc)
    try:
        yield mp
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        mp._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await mp._reader


def write_config(directory: Path, **values: object) -> dict[str, str]:
    """config.json for a simulated device in `directory`; returns the env that points the firmware at it."""
    cfg = {"wifi": [{"ssid": "sim", "password": ""}], "listen_mode": "auto", **values}
    (directory / "config.json").write_text(json.dumps(cfg))
    return {
        "WREN_SIM_CONFIG": str(directory / "config.json"),
        "WREN_SIM_STATE": str(directory / "state.json"),
    }


@pytest.fixture(scope="session")
def opus_build() -> Path:
    """The Wren build, made or found up to date by the same cached step as `make firmware-host`."""
    res = subprocess.run([sys.executable, str(REPO / "tools" / "firmware" / "build_host.py")],
                         capture_output=True, text=True, timeout=1800)
    if res.returncode != 0 or not OPUS_MICROPYTHON.exists():
        pytest.fail("make firmware-host failed:\n" + res.stdout + res.stderr)
    return OPUS_MICROPYTHON


@pytest.fixture
def device_dir(tmp_path: Path) -> Path:
    d = tmp_path / "device"
    d.mkdir()
    return d
