"""A session's replies: one at a time, in order, each in its own task, so audio and `abort` keep flowing
while a reply is spoken. Also the way to speak unprompted (a timer going off).

Each reply has a turn id; the worker makes it the outbox's live turn while it runs, and cancelling
(`cancel`: abort, barge-in) ends the live turn in the outbox first, so not one more frame of it goes out,
then cancels its task (its pipeline goes with it).

Bounds: at most `max_waiting` replies (`[limits] queued_replies`) wait behind the live one, announcements
not counted. Overflow policy: a new typed query replaces the oldest waiting typed query (coalescing: the
person's latest question wins; logged at info); any other reply, or a typed query with no typed query
waiting, pushes out the oldest waiting reply that is not an announcement (logged). Announcements are never
dropped by that rule: at most `MAX_ANNOUNCEMENTS` wait, beyond that `announce` refuses (the caller keeps
them).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable

from wren.privacy import said
from wren.session.reply import ReplyContext, ReplyTurn, TurnRequest

log = logging.getLogger(__name__)

MAX_ANNOUNCEMENTS = 8  # unprompted announcements waiting to be spoken on one device


class ReplyQueue:
    def __init__(
        self,
        ctx: ReplyContext,
        name: str,
        on_turn_ended: Callable[[ReplyTurn], Awaitable[bool]],
        max_waiting: int = 3,
    ) -> None:
        self._ctx = ctx
        self._max_waiting = max(0, max_waiting)
        self._name = name
        self._on_turn_ended = on_turn_ended  # False: stop serving (the connection is being closed)
        self._ids = itertools.count(1)
        # At most max_waiting replies plus MAX_ANNOUNCEMENTS announcements; overflow policy: _make_room.
        self._waiting: deque[ReplyTurn] = deque()
        self._ready = asyncio.Event()
        self._announcements: dict[ReplyTurn, asyncio.Future[bool]] = {}
        self.current: ReplyTurn | None = None
        self._current_task: asyncio.Task[None] | None = None
        self.turns = 0

    @property
    def busy(self) -> bool:
        """A reply is being spoken or waits to be."""
        return self.current is not None or bool(self._waiting)

    def queue(self, request: TurnRequest, stamps: dict[str, float] | None = None) -> ReplyTurn:
        turn = ReplyTurn(next(self._ids), request, self._ctx)
        turn.timing.stamps.update(stamps or {})  # input_end / asr_done of a spoken turn
        if not request.announcement:
            self._make_room(request)
        self._waiting.append(turn)
        self._ready.set()
        self.turns += 1
        return turn

    def _make_room(self, request: TurnRequest) -> None:
        """Before a reply (not an announcement) joins: keep at most `max_waiting` of them waiting."""
        replies = [t for t in self._waiting if not t.request.announcement]
        if len(replies) < self._max_waiting or not replies:  # (max_waiting = 0: the new one waits alone)
            return
        typed = [t for t in replies if t.request.typed] if request.typed else []
        dropped = typed[0] if typed else replies[0]
        self._waiting.remove(dropped)
        dropped.cancelled = True
        self._settle(dropped)
        if typed:
            log.info("%s: %d replies waiting; the new typed query replaces the oldest waiting one (%s)",
                     self._name, len(replies), said((dropped.request.user_text or "")[:80]))
        else:
            log.warning("%s: %d replies waiting; dropped the oldest (%s)", self._name, len(replies), dropped)

    async def announce(self, text: str) -> bool:
        """Speak `text` unprompted: True once its words started going out; False if it could not be spoken
        (too many waiting, or cancelled before a word went out). The caller keeps it then."""
        if len(self._announcements) >= MAX_ANNOUNCEMENTS:
            return False
        heard: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        turn = self.queue(TurnRequest(prompt_text=text, announcement=True))
        self._announcements[turn] = heard
        when = "after the reply" if self.current else "now"
        log.info("%s: announcing %s (%s)", self._name, said(text), when)
        return await heard

    def _settle(self, turn: ReplyTurn) -> None:
        heard = self._announcements.pop(turn, None)
        if heard is not None and not heard.done():
            heard.set_result(bool(turn.spoken))

    async def serve(self) -> None:
        """The worker: run the replies one after another until told to stop."""
        outbox = self._ctx.outbox
        while True:
            await self._ready.wait()
            if not self._waiting:
                self._ready.clear()
                continue
            turn = self._waiting.popleft()
            if turn.cancelled:
                self._settle(turn)
                continue
            self.current = turn
            outbox.go_live(turn.turn_id)
            spawn = asyncio.get_running_loop().create_task
            self._current_task = spawn(turn.run(), name=f"{self._name}:{turn}")
            try:
                await asyncio.wait([self._current_task])
            finally:
                outbox.end_turn(turn.turn_id)
                self.current = None
                self._current_task = None
                self._settle(turn)
            if not await self._on_turn_ended(turn):
                return

    def cancel_all(self) -> None:
        """Mark everything cancelled: nothing more of it is sent (the task is cancelled by the caller)."""
        for waiting in self._waiting:
            waiting.cancelled = True
            self._settle(waiting)
        self._waiting.clear()
        if self.current is not None:
            self.current.cancelled = True

    async def cancel(self, why: str) -> bool:
        """Cancel the live reply and everything waiting; True if that sent a `tts stop`."""
        current = self.current
        self.cancel_all()
        sent_stop = await self._ctx.outbox.cancel_live(why)
        if current is not None:
            if self._current_task is not None:
                self._current_task.cancel()
            log.info("%s: %s cancelled (%s)", self._name, current, why)
        return sent_stop

    async def close(self) -> None:
        """The session is over: cancel everything and wait for the reply in progress to end."""
        self.cancel_all()
        task = self._current_task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for turn in list(self._announcements):
            self._settle(turn)
