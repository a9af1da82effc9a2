"""A session's uplink driver: one `wren.pipeline.uplink.Uplink` per utterance, run in the listen executor.

The uplink is used by one thread at a time: every call is one executor job, remembered (`_job`) and awaited
shielded, so a job always runs to its end and `close()` can wait for one still running after its awaiting
task was cancelled. The executor is `wren.pipeline.batched_executor.BatchedExecutor`; audio goes in with
`submit_together`, so the frames of all the sessions waiting at once are fed in one call and their VAD is
one model run (`wren.pipeline.uplink.feed_together`). With the executor on the event loop, audio of an open
utterance may also come from the loop's uplink round (wren.session.uplink_rounds: `accepts_now`,
`round_item`, `settle`), on the same thread and never while the session's processor is handling anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from wren.config import VadConfig
from wren.pipeline.batched_executor import BatchedExecutor
from wren.pipeline.frames import Frame, InputEnd, StageError, Transcribing, Utterance
from wren.pipeline.recognise import Bias, settle_async
from wren.pipeline.timing import UplinkTiming
from wren.pipeline.turn_detection import ListenMode
from wren.pipeline.uplink import DecodeStage, Uplink, feed_together

log = logging.getLogger(__name__)

# On the event loop (`BatchedExecutor.on_loop`), one job takes at most this many of a session's frames (240 ms
# of audio; the rest go in the next loop round): a round of 64 sessions stays a few hundred frames, tens of
# milliseconds, however far behind the sessions are, so replies keep their pace and sockets are read.
LOOP_RUN_FRAMES = 4


class Listener:
    def __init__(self, speech: Any, vad: VadConfig, executor: BatchedExecutor,
                 timing: UplinkTiming, speaker: str) -> None:
        self._speech = speech
        self._vad = vad
        self._executor = executor
        self.timing = timing
        self._speaker = speaker
        self._decoder: Any = None
        self._rate = 16000
        self._bias: Bias | None = None
        self._uplink: Uplink | None = None
        self._room: Any = None  # the VAD's noise floor, carried from one utterance to the next
        self._job: asyncio.Future[Any] | None = None
        self.mode = ListenMode.AUTO
        self.bad_packets = 0
        self._awaiting_words = 0  # utterances over whose words are still being decoded

    def speech_ended_at(self, utterance: Utterance) -> float:
        """When the person stopped speaking (time.monotonic()): a VAD-ended utterance ended `silence_ms`
        after its last speech; any other when it ended (`listen stop`, the length bound)."""
        silence_s = self._vad.silence_ms / 1000 if utterance.reason is InputEnd.SILENCE else 0.0
        return utterance.ended_at - silence_s

    def configure(self, decoder: Any, device_rate: int, bias: Bias | None) -> None:
        """The device's uplink format, from its hello; the next `begin` uses it."""
        self._decoder, self._rate, self._bias = decoder, device_rate, bias

    @property
    def active(self) -> bool:
        return self._uplink is not None and not self._uplink.ended

    @property
    def hearing(self) -> bool:
        """Someone is (probably) speaking to this device now: push-to-talk held, or speech heard since the
        utterance began (an auto-mode device listening to a quiet room is not)."""
        if self._awaiting_words:
            return True  # the person has stopped and waits for the recogniser's last words
        uplink = self._uplink
        if uplink is None or uplink.ended:
            return False
        return not uplink.mode.ends_by_vad or uplink.heard_speech

    async def _run(self, fn: Callable[..., Any], *args: Any, may_block: bool = False) -> Any:
        return await self._await(self._executor.submit(fn, *args, may_block=may_block))

    async def _await(self, job: asyncio.Future[Any]) -> Any:
        self._job = job  # close() waits for it, even after this task was cancelled
        return await asyncio.shield(job)

    def _open(self, mode: ListenMode) -> None:
        self._release()
        self._uplink = Uplink(self._speech, self._vad, self._decoder, self._rate, mode, self._speaker,
                              self._bias, self._room)
        self._room = self._uplink.room

    def _release(self) -> None:
        uplink, self._uplink = self._uplink, None
        if uplink is not None:
            uplink.close()

    async def begin(self, mode: ListenMode) -> None:
        """A fresh utterance (every `listen start` / wake word): new stages, nothing carried over."""
        self.mode = mode
        await self._run(self._open, mode)
        self.timing.restart()

    async def abandon(self) -> None:
        if self._uplink is not None:
            await self._run(self._release)

    def _ended(self) -> None:
        if self._uplink is not None and self._uplink.ended:
            self._release()  # its Utterance is out: give the VAD context and recogniser back now

    async def feed(self, payloads: list[tuple[bytes, float | None]]) -> list[Frame]:
        """Feed audio (payload, arrival) in order; returns the turn events and errors that came out.

        Stops early at a turn event (the caller acts on it, then calls again with what is left), and on the
        loop after LOOP_RUN_FRAMES: returns with `payloads` trimmed to the unconsumed tail."""
        uplink = self._uplink
        if uplink is None or uplink.ended:
            return []
        run = payloads[:LOOP_RUN_FRAMES] if self._executor.on_loop else payloads
        outcomes = await self._await(
            self._executor.submit_together(feed_listeners, (self, uplink, [p for p, _ in run])))
        events = self.settle(payloads, outcomes)
        del payloads[: len(outcomes)]
        return await self.with_words(events)

    # ---- fed in an uplink round (wren.session.uplink_rounds) -------------------------------------

    def accepts_now(self) -> bool:
        """Frames may go into this loop round's call (no executor job): the uplink runs on the loop, an
        utterance is open, and no finished one is waiting for its words."""
        return self._executor.on_loop and self.active and not self._awaiting_words

    def round_item(self, payloads: list[bytes]) -> tuple[Listener, Uplink, list[bytes]] | None:
        """This listener's item for `feed_listeners`, or None when no utterance is open any more."""
        uplink = self._uplink
        if uplink is None or uplink.ended:
            return None
        return self, uplink, payloads[:LOOP_RUN_FRAMES]

    def settle(self, payloads: list[tuple[bytes, float | None]], outcomes: list[Any]) -> list[Frame]:
        """After a feed (one outcome per frame it consumed, from the front of `payloads`): each decoded
        frame's time through the uplink, corrupt packets counted; the turn events and errors that came out
        (a `Transcribing` still waiting for its words: see `with_words`)."""
        events: list[Frame] = []
        for (_payload, arrival), frames in zip(payloads, outcomes, strict=False):
            decoded = True
            for frame in frames:
                if isinstance(frame, StageError) and frame.stage == DecodeStage.name:
                    decoded = False  # a corrupt packet: counted, not an event
                    log.debug("dropped a bad audio frame: %s", frame.error)
                else:
                    events.append(frame)
            if decoded:
                self.timing.processed(arrival)
            else:
                self.bad_packets += 1
        return events

    async def with_words(self, events: list[Frame]) -> list[Frame]:
        """`events` with a `Transcribing` replaced by its `Utterance` once the recogniser has its words."""
        if not any(isinstance(f, Transcribing) for f in events):
            return events  # the common case, every frame: no coroutine more
        with self._words_pending():
            return await _with_words(events)

    async def end(self, reason: InputEnd = InputEnd.LISTEN_STOP) -> Utterance:
        """Close the utterance now (`listen stop`); its words (empty if the recogniser had none)."""
        uplink = self._uplink
        assert uplink is not None and not uplink.ended

        def finish() -> list[Frame]:
            frames = uplink.end(reason)
            self._release()
            return frames

        # may_block: a recogniser without `finish_later` (pocketsphinx, vosk) waits for its decode here.
        with self._words_pending():  # from before the uplink is released on the listen thread
            frames = await _with_words(await self._run(finish, may_block=True))
        return next(f for f in frames if isinstance(f, Utterance))

    @contextlib.contextmanager
    def _words_pending(self) -> Iterator[None]:
        """`hearing` stays true while an utterance that is over waits for its words."""
        self._awaiting_words += 1
        try:
            yield
        finally:
            self._awaiting_words -= 1

    async def close(self) -> None:
        """The session is over: wait for a job still running, then release."""
        if self._job is not None and not self._job.done():
            await asyncio.wait([self._job])
        try:
            await self._run(self._release)
        except Exception:
            log.exception("releasing the uplink failed")


def feed_listeners(items: list[tuple[Listener, Uplink, list[bytes]]]) -> list[Any]:
    """The audio of many sessions in one call (see `feed_together`): the listen executor's call for every
    session waiting at once, and an uplink round's (wren.session.uplink_rounds)."""
    outcomes = feed_together([(uplink, payloads) for _, uplink, payloads in items])
    for at, ((listener, _, _), outcome) in enumerate(zip(items, outcomes, strict=True)):
        if not isinstance(outcome, BaseException):
            try:
                listener._ended()
            except Exception as exc:  # this session's failure, not the others'
                outcomes[at] = exc
    return outcomes


async def _with_words(frames: list[Frame]) -> list[Frame]:
    """The frames, with a `Transcribing` replaced by its `Utterance` once the words are out (awaited here,
    on the event loop, so no listen thread waits for a busy recogniser)."""
    if not any(isinstance(f, Transcribing) for f in frames):
        return frames
    out: list[Frame] = []
    for frame in frames:
        out.extend(await settle_async(frame) if isinstance(frame, Transcribing) else (frame,))
    return out
