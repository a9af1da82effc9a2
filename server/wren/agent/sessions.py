"""Who runs a turn for a session key, and how many turns run at once: the one owner of that policy.

- One `asyncio.Lock` per session key, in a WeakValueDictionary (an idle key costs nothing: the lock goes
  away with the last turn holding or awaiting it), then the store's lease on the key
  (`SessionStore.turn_lease`: a no-op for SQLite, a lease in Redis when instances share the store).
  Every entry point (voice `begin_turn`, the bus, `process_direct`) takes both through `occupy()`: one
  turn at a time per key, on every instance, and
  the next turn on a key always sees the previous one's committed history.
- A global gate (`asyncio.Semaphore`, `[agent] max_concurrent_turns`) bounds engine work across sessions.
  It is only reachable from an `Occupancy` (`engine_slot()`), so the lock is always taken before the gate:
  a turn queued behind another turn of its own key never holds an engine slot.
- A bus turn registers a bounded pending queue right after taking the lock (before waiting on the gate).
  `offer()` puts a follow-up for that key into it; the turn answers it at a safe boundary
  (`Occupancy.take_follow_ups`), and whatever is left when the turn ends is republished as fresh turns once
  the lock is released. Overflow policy: a full queue (PENDING_QUEUE_SIZE) refuses the message and the
  dispatcher runs it as its own turn, which waits for the lock like any other. Nothing is dropped (except
  when the turn is cancelled because the agent is closing: then the bus is gone too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable

from wren.agent.messages import InboundMessage

log = logging.getLogger(__name__)

PENDING_QUEUE_SIZE = 20  # follow-ups queued per active bus turn; full -> offer() refuses: its own turn
UNLIMITED_TURNS = 1_000_000  # the gate's size when `max_concurrent_turns` <= 0 (no limit configured)

Republish = Callable[[InboundMessage], Awaitable[None]]
Lease = Callable[[str], contextlib.AbstractAsyncContextManager[None]]  # SessionStore.turn_lease


class Occupancy:
    """The running turn's hold on its session key: the key's lock is held for as long as this is in use."""

    def __init__(
        self, key: str, gate: asyncio.Semaphore, follow_ups: asyncio.Queue[InboundMessage] | None
    ) -> None:
        self.key = key
        self._gate = gate
        self._follow_ups = follow_ups

    @property
    def accepts_follow_ups(self) -> bool:
        """True for a bus turn: follow-ups for this key are queued into it rather than waiting for it."""
        return self._follow_ups is not None

    def engine_slot(self) -> asyncio.Semaphore:
        """The global gate, held while the engine works: `async with occupancy.engine_slot(): ...`."""
        return self._gate

    def take_follow_ups(self, limit: int) -> list[InboundMessage]:
        """Up to `limit` queued follow-ups, oldest first (always none for voice and direct turns)."""
        taken: list[InboundMessage] = []
        while self._follow_ups is not None and len(taken) < limit:
            try:
                taken.append(self._follow_ups.get_nowait())
            except asyncio.QueueEmpty:
                break
        return taken


@contextlib.asynccontextmanager
async def _no_lease(key: str) -> AsyncIterator[None]:
    yield


class SessionTurns:
    """Per-key locks, the global gate and the follow-up queues of active bus turns (see the module doc)."""

    def __init__(self, max_concurrent_turns: int, republish: Republish, lease: Lease | None = None) -> None:
        self._gate = asyncio.Semaphore(max_concurrent_turns if max_concurrent_turns > 0 else UNLIMITED_TURNS)
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._pending: dict[str, asyncio.Queue[InboundMessage]] = {}
        self._republish = republish  # where leftovers go once their turn ends (the bus's inbound side)
        self._lease = lease or _no_lease  # the key across instances (a store shared with others)

    def offer(self, msg: InboundMessage) -> bool:
        """Queue a bus message into the active turn of its key. False means no turn takes it (none is
        running for the key, or the queue is full): the caller runs it as its own turn."""
        queue = self._pending.get(msg.session_key)
        if queue is None:
            return False
        try:
            queue.put_nowait(msg)
        except asyncio.QueueFull:
            log.info("pending queue full for %s; message becomes its own turn", msg.session_key)
            return False
        return True

    def queued(self, key: str) -> int:
        """How many follow-ups wait in the key's active bus turn (0 if there is none)."""
        queue = self._pending.get(key)
        return queue.qsize() if queue is not None else 0

    def busy(self, key: str) -> bool:
        """Whether a turn currently holds the key."""
        lock = self._locks.get(key)
        return lock is not None and lock.locked()

    @contextlib.asynccontextmanager
    async def occupy(self, key: str, *, accept_follow_ups: bool = False) -> AsyncIterator[Occupancy]:
        """Wait for the key, hold it for the body, then republish the follow-ups the turn did not take.

        Leftovers are republished after the lock is released (so their turns can take it), also when the
        body failed; not when it was cancelled, which only happens when the agent is closing.
        """
        leftovers: list[InboundMessage] = []
        try:
            async with self._lock(key), self._lease(key):
                queue = self._register(key) if accept_follow_ups else None
                try:
                    yield Occupancy(key, self._gate, queue)
                finally:
                    if queue is not None:
                        leftovers = self._unregister(key, queue)
        except Exception:
            await self._republish_all(leftovers)
            raise
        await self._republish_all(leftovers)

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    def _register(self, key: str) -> asyncio.Queue[InboundMessage]:
        # Bounded (PENDING_QUEUE_SIZE); full -> offer() refuses and the message becomes its own turn.
        queue: asyncio.Queue[InboundMessage] = asyncio.Queue(PENDING_QUEUE_SIZE)
        self._pending[key] = queue
        return queue

    def _unregister(self, key: str, queue: asyncio.Queue[InboundMessage]) -> list[InboundMessage]:
        """Remove the key's pending queue (if still this one) and return what was left in it."""
        if self._pending.get(key) is queue:
            del self._pending[key]
        leftovers = []
        while not queue.empty():
            leftovers.append(queue.get_nowait())
        return leftovers

    async def _republish_all(self, leftovers: list[InboundMessage]) -> None:
        for msg in leftovers:  # never dropped: each becomes a fresh turn
            await self._republish(msg)
