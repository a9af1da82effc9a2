"""Uplink rounds: the audio frames every session read in one event-loop iteration, fed in one call, straight
from the socket readers.

With the uplink on the event loop (`[server] uplink_on_loop`, Moonshine), a frame used to take three hops
through the loop's callbacks: the socket reader put it in the session's inbox, the session's processor task
woke to take it and handed it to the listen executor as a job with a future, the executor's loop round ran
it, and the task woke again when that future was resolved. At 200 streaming devices (3,333 frames a second)
the hops, the socket and asyncio were about as much of the loop's time as the work itself
(docs/performance.md, round 23). A session whose processor has
nothing to do (inbox empty, not busy, its uplink open and fed by the turn-taking table) now adds the frame
here from its reader; one `call_soon` callback per loop iteration feeds the frames of all such sessions
through `wren.session.listening.feed_listeners` (their VAD in one model call, as the executor's round did),
and only what needs the session's attention (someone started speaking, an utterance ended, frames behind
such an event) goes on to its inbox, in order.

Order is kept: a session adds frames here only while its inbox is empty, and before it puts anything else
in its inbox (a text frame, a reply's end) it has the pending round run first (`run_if_holding`), so the
round's events are queued ahead of it.

Bound: at most the frames the sessions' readers take from their sockets in one loop iteration, which the
uplink gate (`[limits] uplink_realtime_factor`) limits per session; the sessions are bounded by `[limits]
connections`. No overflow policy is needed: the round runs in the same loop iteration's callbacks.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from wren.session.listening import Listener, feed_listeners

log = logging.getLogger(__name__)

MAX_SESSIONS_PER_CALL = 64  # sessions fed in one `feed_listeners` call (as the listen executor's rounds)

Pending = list[tuple[bytes, float | None]]  # (payload, arrival) in arrival order


class RoundMember(Protocol):
    listener: Listener

    def round_done(self, fed: Pending, outcome: list[Any] | BaseException | None) -> None:
        """The round fed a prefix of `fed` (one outcome per frame consumed), failed, or (None) the uplink had
        closed before it ran; the member takes care of the rest."""


class UplinkRounds:
    def __init__(self) -> None:
        self._pending: dict[RoundMember, Pending] = {}  # insertion-ordered: sessions in arrival order
        self._scheduled = False
        self.rounds = 0  # rounds run and frames fed in them (tests, docs)
        self.frames = 0

    def add(self, member: RoundMember, payload: bytes, arrival: float | None) -> None:
        frames = self._pending.get(member)
        if frames is None:
            frames = self._pending[member] = []
        frames.append((payload, arrival))
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.run)

    def holds(self, member: RoundMember) -> bool:
        return member in self._pending

    def run_if_holding(self, member: RoundMember) -> None:
        """Run the pending round now if it has frames of `member` (which is about to queue something that
        must come after them)."""
        if member in self._pending:
            self.run()

    def run(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, {}
        if not pending:
            return  # already run early (`run_if_holding`)
        self.rounds += 1
        members = list(pending)
        for start in range(0, len(members), MAX_SESSIONS_PER_CALL):
            self._feed(members[start : start + MAX_SESSIONS_PER_CALL], pending)

    def _feed(self, members: list[RoundMember], pending: dict[RoundMember, Pending]) -> None:
        items, fed_members = [], []
        for member in members:
            item = member.listener.round_item([payload for payload, _ in pending[member]])
            if item is None:
                _hand_back(member, pending[member], None)
            else:
                items.append(item)
                fed_members.append(member)
        if not items:
            return
        try:
            outcomes = feed_listeners(items)
        except Exception as exc:  # the call as a whole failed: every session of it did
            outcomes = [exc] * len(items)
        for member, outcome in zip(fed_members, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                self.frames += len(outcome)
            _hand_back(member, pending[member], outcome)


def _hand_back(member: RoundMember, fed: Pending, outcome: list[Any] | BaseException | None) -> None:
    try:
        member.round_done(fed, outcome)
    except Exception:  # one session's failure never stops the others' frames
        log.exception("an uplink round's result could not be handed to its session")
