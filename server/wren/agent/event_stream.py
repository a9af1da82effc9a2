"""The bounded hand-off between a turn's engine pump and the consumer of its events.

Overflow policy: back-pressure. `put()` waits while EVENT_QUEUE_SIZE events are unread, so an engine that
produces faster than the speaking pipeline consumes is paused instead of buffered without limit. The wait
is a plain await, so cancelling the pump (barge-in: `Turn.interrupt`) still ends it at once. `close()`
(end of the reply, or the consumer stopped) never waits and never fails: the end marker is outside the
bound, and a `put()` waiting on a closed stream returns at once, since nobody will read what it adds.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

EVENT_QUEUE_SIZE = 64  # unread events per turn; full -> the engine pump waits for the consumer

T = TypeVar("T")


class EventStream(Generic[T]):
    """A bounded FIFO with an end: `get()` returns the items put before `close()`, then None."""

    def __init__(self, maxsize: int = EVENT_QUEUE_SIZE) -> None:
        if maxsize < 1:
            raise ValueError("an event stream needs room for at least one event")
        self._items: deque[T] = deque()  # at most maxsize items; full -> put() waits (back-pressure)
        self._maxsize = maxsize
        self._closed = False
        self._readable = asyncio.Event()  # set while there is an item to get or the stream is closed
        self._writable = asyncio.Event()  # set while there is room or the stream is closed
        self._writable.set()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    async def put(self, item: T) -> bool:
        """Append `item`, waiting while the stream is full. False (item discarded) once it is closed."""
        while len(self._items) >= self._maxsize and not self._closed:
            await self._writable.wait()
        if self._closed:
            return False
        self._items.append(item)
        self._update()
        return True

    async def get(self) -> T | None:
        """The oldest unread item, waiting for one; None once the stream is closed and drained."""
        while not self._items and not self._closed:
            await self._readable.wait()
        if not self._items:
            return None
        item = self._items.popleft()
        self._update()
        return item

    async def readable(self, timeout: float) -> bool:
        """Whether an item (or the end) can be got at once, waiting up to `timeout` s for it; consumes
        nothing, and is safe to time out."""
        if not self._readable.is_set():
            try:
                async with asyncio.timeout(timeout):
                    await self._readable.wait()
            except TimeoutError:
                return False
        return True

    def close(self) -> None:
        """End the stream: wakes a waiting `get()` and a waiting `put()`. Idempotent; never waits."""
        self._closed = True
        self._update()

    def _update(self) -> None:
        if self._items or self._closed:
            self._readable.set()
        else:
            self._readable.clear()
        if len(self._items) < self._maxsize or self._closed:
            self._writable.set()
        else:
            self._writable.clear()
