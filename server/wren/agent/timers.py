"""Timers, alarms and reminders: kept per session, persisted, and spoken on the device when due.

`TimerService` (one per AgentLoop) owns every pending timer of every session key. Each one is kept in the
session store (`wren.store`), so they survive a restart: `start()` loads the undelivered ones and a timer
that fell due while the server was down fires at once.

The agent never talks to a device itself (dependencies point transport → session → agent). Whoever
owns the live sessions hands the service a *delivery callback*, `async (session_key, text) -> bool`
(`WrenServer` does, `set_delivery`): it speaks the words on that key's device and says whether they
were heard. An announcement that could not be delivered (no device connected, socket closed
mid-way) stays undelivered and is offered again when the device says hello (`device_connected`) or
every `RETRY_S`. The session asks `has_pending()` / `status()` to keep an idle device's socket open
and to tell the device about its timers.

With a store other instances share (Redis, `store.shared`), a timer set through one instance may be due
while its device is connected to another. Every instance then re-reads the pending timers when the store's
`timers_version` changed (looked at every `SHARED_SYNC_S` and at each hello), speaks only timers whose
device is connected to it (`reachable`), and claims a timer in the store before speaking it: it fires
once across the cluster.

One scheduler task sleeps until the next due time (at most `MAX_WAIT_S`, so wall-clock changes and
retries are picked up) on the agent's clock (`AgentLoop.now`), the same clock the words were parsed
with. Deliveries run in their own tasks, so a device that takes long to speak delays nobody else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime

from wren.agent.timeparse import duration_adjective, speak_clock
from wren.privacy import said
from wren.store.records import SessionStore, TimerRow

log = logging.getLogger(__name__)

Delivery = Callable[[str, str], Awaitable[bool]]
Reachable = Callable[[str], bool]  # is a device of this session key connected to this instance?

KINDS = ("timer", "alarm", "reminder")
MAX_PER_SESSION = 20  # pending timers, alarms and reminders per session key together
MAX_LABEL_CHARS = 80
MAX_WAIT_S = 30.0  # the scheduler re-reads the clock at least this often
RETRY_S = 15.0  # an announcement the device did not take is offered again after this
LATE_S = 60.0  # later than this, the words say when it went off
STALE_AFTER_S = 12 * 3600.0  # an announcement this late is dropped rather than spoken (no one waits for it)
SHARED_SYNC_S = 0.5  # a shared store's timers are re-read (when changed) at least this often
CLAIM_S = 120.0  # a claim to speak a timer lapses after this, should its instance die mid-way


class TimerLimitReached(Exception):
    """The session already has MAX_PER_SESSION pending timers."""


class TimerService:
    def __init__(self, store: SessionStore, now: Callable[[], datetime]) -> None:
        self._store = store
        self._now = now  # local, timezone-aware: AgentLoop.now (tests may replace it)
        self._by_key: dict[str, dict[int, TimerRow]] = {}
        self._retry_at: dict[int, float] = {}
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._connects: dict[str, int] = {}  # hellos per key: a delivery started before one may retry at once
        self._changed = asyncio.Event()
        self._delivery: Delivery | None = None
        self._reachable: Reachable | None = None
        self._version = -1  # the shared store's timers_version last read
        self._store_down = False  # the last read of the shared store failed (logged once per outage)
        self._scheduler: asyncio.Task[None] | None = None
        self._closing = False  # the scheduler's loop ends even if a library swallowed the cancel

    # ---- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._store.shared:
            self._version = await self._store.timers_version()
        rows = await self._store.undelivered_timers()
        self._by_key = self._grouped(rows)
        if rows:
            log.info("timers: %d pending from before the restart", len(rows))
        self._scheduler = asyncio.get_running_loop().create_task(self._schedule(), name="wren-timers")

    async def close(self) -> None:
        self._closing = True
        self._changed.set()
        tasks = [t for t in [self._scheduler, *self._in_flight.values()] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._scheduler = None
        self._in_flight.clear()

    def set_delivery(self, delivery: Delivery | None, reachable: Reachable | None = None) -> None:
        """Who speaks announcements (None: nobody, they wait), and, for a shared store, which keys have a
        device here (None: all). Offers every due one again at once."""
        self._delivery = delivery
        self._reachable = reachable
        self._retry_at.clear()
        self._changed.set()

    def clock(self) -> float:
        return self._now().timestamp()

    # ---- what the skill and the session ask ---------------------------------------------------------

    def pending(self, session_key: str) -> list[TimerRow]:
        """The session's undelivered timers, soonest first (one already due but not yet heard included)."""
        return sorted(self._by_key.get(session_key, {}).values(), key=lambda t: (t.due_at, t.id))

    def has_pending(self, session_key: str) -> bool:
        return bool(self._by_key.get(session_key))

    def status(self, session_key: str) -> tuple[int, float | None]:
        """(how many are pending, seconds until the soonest or None)."""
        timers = self._by_key.get(session_key)
        if not timers:
            return 0, None
        return len(timers), max(0.0, min(t.due_at for t in timers.values()) - self.clock())

    async def add(self, session_key: str, kind: str, label: str, due_at: float) -> TimerRow:
        if kind not in KINDS:
            raise ValueError(f"unknown timer kind {kind!r}")
        if len(self._by_key.get(session_key, {})) >= MAX_PER_SESSION:
            raise TimerLimitReached()
        row = TimerRow(0, session_key, kind, label.strip()[:MAX_LABEL_CHARS], due_at, self.clock())
        row.id = await self._store.add_timer(row)
        self._by_key.setdefault(session_key, {})[row.id] = row
        log.info("timers: %s %d for %s due in %.0f s (%s)", kind, row.id, session_key,
                 due_at - row.created_at, said(row.label))
        self._changed.set()
        return row

    async def cancel(self, timer: TimerRow) -> None:
        self._forget(timer)
        await self._store.delete_timer(timer.id)
        log.info("timers: %s %d of %s cancelled", timer.kind, timer.id, timer.session_key)
        self._changed.set()

    def device_connected(self, session_key: str) -> None:
        """The device said hello: what is due for it is spoken now, not at the next retry."""
        self._connects[session_key] = self._connects.get(session_key, 0) + 1
        for timer_id in self._by_key.get(session_key, {}):
            self._retry_at.pop(timer_id, None)
        self._changed.set()

    # ---- words ----------------------------------------------------------------------------------------

    def announcement(self, timer: TimerRow) -> str:
        """What the device says when `timer` goes off (or, when it is late, when it went off)."""
        now = self._now()
        due = datetime.fromtimestamp(timer.due_at, now.tzinfo)
        late = now.timestamp() - timer.due_at > LATE_S
        if timer.kind == "timer":
            name = timer.label or duration_adjective(timer.due_at - timer.created_at)
            if late:
                return f"Your {name} timer finished at {speak_clock(due)}."
            return f"Your {name} timer is done."
        if timer.kind == "alarm":
            if late:
                return f"It's {speak_clock(now)}. Your alarm was set for {speak_clock(due)}."
            if timer.label == "wake up" or due.hour < 12:
                return f"It's {speak_clock(due)}. Time to wake up."
            return f"It's {speak_clock(due)}. This is your alarm."
        return f"Reminder: {timer.label}." if timer.label else "This is your reminder."

    # ---- scheduling -----------------------------------------------------------------------------------

    def _forget(self, timer: TimerRow) -> None:
        timers = self._by_key.get(timer.session_key)
        if timers is not None:
            timers.pop(timer.id, None)
            if not timers:
                del self._by_key[timer.session_key]
        self._retry_at.pop(timer.id, None)

    @staticmethod
    def _grouped(rows: list[TimerRow]) -> dict[str, dict[int, TimerRow]]:
        by_key: dict[str, dict[int, TimerRow]] = {}
        for row in rows:
            by_key.setdefault(row.session_key, {})[row.id] = row
        return by_key

    async def _sync(self) -> None:
        """Re-read the pending timers if another instance (or this one) changed them in the shared store."""
        try:
            version = await self._store.timers_version()
            if version == self._version:
                return
            rows = await self._store.undelivered_timers()
        except Exception as exc:  # the store is unreachable: go on with what is known, try again soon
            if not self._store_down:  # once per outage, not every SHARED_SYNC_S
                log.warning("timers: the shared store could not be read: %s", exc)
            self._store_down = True
            return
        if self._store_down:
            log.info("timers: the shared store can be read again")
        self._store_down = False
        self._version = version
        self._by_key = self._grouped(rows)
        # Retry times of timers gone meanwhile (spoken or cancelled through another instance) go too.
        pending = {row.id for row in rows}
        self._retry_at = {i: at for i, at in self._retry_at.items() if i in pending}

    def _speaks_here(self, session_key: str) -> bool:
        return not self._store.shared or self._reachable is None or self._reachable(session_key)

    async def _schedule(self) -> None:
        while not self._closing:
            self._changed.clear()  # before looking: a change made while we look wakes the wait below
            wait = MAX_WAIT_S
            if self._store.shared:
                await self._sync()
                wait = SHARED_SYNC_S
            now = self.clock()
            for timers in list(self._by_key.values()):
                for timer in list(timers.values()):
                    if timer.id in self._in_flight:
                        continue
                    if now - timer.due_at > STALE_AFTER_S:
                        await self._drop_stale(timer)
                        continue
                    ready_at = max(timer.due_at, self._retry_at.get(timer.id, 0.0))
                    if ready_at > now:
                        wait = min(wait, ready_at - now)
                    elif self._delivery is None or not self._speaks_here(timer.session_key):
                        # Nobody to speak to yet (here: another instance may have the device).
                        self._retry_at[timer.id] = now + (SHARED_SYNC_S if self._delivery else RETRY_S)
                    else:
                        task = asyncio.get_running_loop().create_task(self._deliver(timer, self._delivery))
                        self._in_flight[timer.id] = task
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that arrives as the event
            # is set (close() does both at once), and the scheduler would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._changed.wait()

    async def _drop_stale(self, timer: TimerRow) -> None:
        log.info("timers: %s %d of %s is %.0f h overdue and was never heard; dropped", timer.kind, timer.id,
                 timer.session_key, (self.clock() - timer.due_at) / 3600)
        self._forget(timer)
        await self._store.mark_timer_delivered(timer.id)

    async def _deliver(self, timer: TimerRow, delivery: Delivery) -> None:
        connects = self._connects.get(timer.session_key, 0)
        try:
            if not await self._store.claim_timer(timer.id, CLAIM_S):
                # Spoken (or being spoken) by another instance: the next sync drops it.
                self._retry_at[timer.id] = self.clock() + SHARED_SYNC_S
                return
            text = self.announcement(timer)
            try:
                heard = bool(await delivery(timer.session_key, text))
            except Exception:
                log.exception("timers: delivering %s %d to %s failed", timer.kind, timer.id,
                              timer.session_key)
                heard = False
            if heard:
                log.info("timers: %s %d spoken on %s: %s", timer.kind, timer.id, timer.session_key,
                         said(text))
                self._forget(timer)
                await self._store.mark_timer_delivered(timer.id)
            else:
                await self._store.release_timer(timer.id)  # another instance may have the device now
                if self._connects.get(timer.session_key, 0) == connects:
                    # Not connected (or cut off): kept, and offered again at the next hello or retry.
                    self._retry_at[timer.id] = self.clock() + RETRY_S
        except Exception:
            log.exception("timers: %s %d of %s could not be delivered", timer.kind, timer.id,
                          timer.session_key)
            self._retry_at[timer.id] = self.clock() + RETRY_S
        finally:
            self._in_flight.pop(timer.id, None)
            self._changed.set()
