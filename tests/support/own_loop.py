"""A local stand-in server (a fake LLM, a fake Home Assistant) on an event loop of its own thread, so that
a Wren server running in the test's ServerThread reaches it as it would a real endpoint."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar


class Startable(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


S = TypeVar("S", bound=Startable)


@contextmanager
def on_own_loop(server: S, name: str) -> Iterator[S]:
    """Start `server` on a new loop in a daemon thread; always stop it and the loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name=name, daemon=True)
    thread.start()

    def run(coro: Any) -> None:
        asyncio.run_coroutine_threadsafe(coro, loop).result(10)

    try:
        run(server.start())
        yield server
    finally:
        run(server.stop())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
