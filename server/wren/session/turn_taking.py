"""Turn-taking: the listen messages, the uplink's turn events and the end of replies, acted on through the
listen-state table (wren.session.listen_rules).

Everything here runs on the session's inbox processor, one item at a time, so the utterance's uplink is never
touched from two tasks (a reply ending is posted to the inbox, not acted on from the reply worker).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from wren.pipeline.frames import Frame, InputEnd, SpeechOnset, Utterance
from wren.pipeline.turn_decision import GiveUp, Prompt, Reply, Silence, TurnDecider
from wren.pipeline.turn_detection import ListenMode
from wren.privacy import said
from wren.session.limits import TypedGate
from wren.session.listen_rules import Action, ListenEvent, ListenState, action
from wren.session.listening import Listener
from wren.session.replies import ReplyQueue
from wren.session.reply import TurnRequest

log = logging.getLogger(__name__)

# Spoken when an utterance found no recogniser free (`Utterance.asr_unavailable`: `[limits] asr_streams`
# reached, or no ASR worker running). Not an empty-input prompt: the person was not misheard, nobody
# listened, so it says to try again and never counts toward the give-up rule (the session stays usable).
ASR_BUSY_REPLY = "Sorry, I can't listen right now. Please try again in a moment."

# How an utterance ended → the table's event for it.
_ENDED_BY = {
    InputEnd.LISTEN_STOP: ListenEvent.STOP,  # `listen stop`, or an empty binary frame
    InputEnd.NO_SPEECH: ListenEvent.NO_SPEECH,
    InputEnd.SILENCE: ListenEvent.INPUT_END,
    InputEnd.MAX_LENGTH: ListenEvent.INPUT_END,
}


class TurnTaking:
    def __init__(
        self,
        listener: Listener,
        replies: ReplyQueue,
        *,
        name: str,
        session_key: str,
        agent: Any,  # render_prompt(session_key, kind, count)
        is_wake_word: Callable[[str], bool],
        keep_socket: Callable[[], bool],  # a pending timer will speak on this socket
        touch: Callable[[], None],
        on_state: Callable[[str], None],
        answer_abort: Callable[[], Awaitable[None]],
        typed_gate: TypedGate | None = None,
    ) -> None:
        self.listener = listener
        self.replies = replies
        self.decider = TurnDecider()
        self.mode = ListenMode.AUTO
        self.name = name
        self._session_key = session_key
        self._agent = agent
        self._is_wake_word = is_wake_word
        self._keep_socket = keep_socket
        self._touch = touch
        self._on_state = on_state
        self._answer_abort = answer_abort
        self.typed_gate = typed_gate or TypedGate(0, 0, name)  # `[limits]`: detect texts per minute, length
        self._wants_listening = False  # listened this session and did not say `listen stop` since

    @property
    def state(self) -> ListenState:
        return ListenState.of(self.listener.active, self.replies.busy)

    def _lookup(self, event: ListenEvent) -> Action:
        return action(event, self.state, self.listener.mode if self.listener.active else self.mode)

    # ---- messages from the device ---------------------------------------------------------------

    async def on_listen(self, msg: dict) -> None:
        state = msg["state"]
        if state == "detect" and not self.typed_gate.admit():
            return  # a flood of texts: refused, and not activity either (counted by the gate)
        self._touch()
        if state == "start":
            self.mode = ListenMode(msg["mode"])
            self._wants_listening = True
            await self._begin(self.mode, "listen start")
        elif state == "stop":
            self._wants_listening = False
            if self._lookup(ListenEvent.STOP) is Action.END:
                await self._end(InputEnd.LISTEN_STOP)
            else:
                log.debug("%s: listen stop while not listening; ignored", self.name)
        elif state == "detect":
            text = self.typed_gate.cut(msg["text"])
            if self._is_wake_word(text):
                log.info("%s: wake word %r; listening (%s)", self.name, text, self.mode.value)
                self._wants_listening = True
                self.decider.wake()
                await self._begin(self.mode, "wake word")
            elif text.strip():
                await self._typed(text.strip())

    async def _typed(self, text: str) -> None:
        log.info("%s: typed query %s", self.name, said(text))
        todo = self._lookup(ListenEvent.TYPED)
        if todo is Action.RESTART_AND_ANSWER:
            await self._begin(self.listener.mode, "typed query; the mic keeps streaming")
        elif todo is Action.ABANDON_AND_ANSWER:
            await self.listener.abandon()
            self._on_state("typed query")
        self.decider.typed()
        self.replies.queue(TurnRequest(user_text=text, typed=True))

    async def on_audio(self, pending: list[tuple[bytes, float | None]]) -> int:
        """Feed audio (payload, arrival) in order; an empty payload is an end-of-recording mark. Returns how
        many frames were dropped because nothing was listening."""
        dropped = 0
        while pending:
            if not pending[0][0]:  # an empty binary frame: the end of the recording (browser clients)
                del pending[0]
                if self._lookup(ListenEvent.END_MARK) is Action.END:
                    self._wants_listening = False  # exactly like `listen stop`
                    await self._end(InputEnd.LISTEN_STOP)
                continue
            upto = next((i for i, (payload, _) in enumerate(pending) if not payload), len(pending))
            if self._lookup(ListenEvent.AUDIO) is Action.DROP:
                dropped += upto
                del pending[:upto]
                continue
            run = pending[:upto]
            del pending[:upto]
            await self.on_uplink_events(await self.listener.feed(run))  # consumes a prefix: up to an event
            pending[:0] = run  # the rest goes through the table again (the state may have changed)
        return dropped

    async def on_uplink_events(self, events: list[Frame]) -> None:
        """Act on what the uplink said about audio already fed: someone started speaking, an utterance is
        over (with its words). Anything else (a stage's error) was logged where it happened."""
        for event in events:
            if isinstance(event, SpeechOnset):
                await self._on_onset()
            elif isinstance(event, Utterance):
                await self._on_utterance(event)

    def feeds_audio(self) -> bool:
        """Audio arriving now goes straight into the uplink (the table's FEED)."""
        return self._lookup(ListenEvent.AUDIO) is Action.FEED

    async def on_abort(self, reason: str | None) -> None:
        log.info("%s: abort (%s)", self.name, reason or "button")
        sent_stop = await self.replies.cancel(f"abort {reason or ''}".strip())
        self._on_state("abort")
        if not sent_stop:
            # Always answer an abort: a device that aborted from speaking waits for it (78 #337).
            await self._answer_abort()

    async def on_reply_ended(self) -> None:
        """Posted by the session after each reply: auto and realtime devices are listening again."""
        if self._lookup(ListenEvent.REPLY_ENDED) is Action.RESUME and self._wants_listening:
            await self._begin(self.mode, "listening again after tts stop")

    # ---- the uplink's turn events ---------------------------------------------------------------

    async def _on_onset(self) -> None:
        self._touch()
        if self._lookup(ListenEvent.ONSET) is Action.BARGE_IN:
            log.info("%s: speech during playback (realtime); barging in", self.name)
            await self.replies.cancel("barge-in")
            self._on_state("barge-in")

    async def _begin(self, mode: ListenMode, why: str) -> None:
        await self.listener.begin(mode)
        self._on_state(f"{why}, {mode.value}")

    async def _end(self, reason: InputEnd) -> None:
        await self._on_utterance(await self.listener.end(reason))

    async def _on_utterance(self, utterance: Utterance) -> None:
        mode = self.listener.mode
        log.info("%s: utterance ended (%s, %d ms audio, speech=%s): %s", self.name, utterance.reason.value,
                 utterance.audio_ms, utterance.heard_speech, said(utterance.text))
        # The utterance is over, so the state is looked up as it was while it was being captured.
        state = ListenState.of(True, self.replies.busy)
        todo = action(_ENDED_BY[utterance.reason], state, mode)
        if todo is Action.BEGIN_AGAIN:  # no speech while a reply plays: only the timer restarts
            await self._begin(mode, "no speech while replying; timer restarted")
            return
        if todo is Action.END_THEN_AGAIN:
            await self._begin(mode, "realtime keeps listening")
        else:
            self._on_state(utterance.reason.value)
        stamps = {"input_end": utterance.ended_at, "asr_done": utterance.decoded_at}
        if utterance.asr_unavailable:
            log.info("%s: no recogniser was free for this utterance; answering busy", self.name)
            self.replies.queue(TurnRequest(prompt_text=ASR_BUSY_REPLY), stamps)
            return
        decision = self.decider.decide(utterance.text, mode, utterance.heard_speech, self._keep_socket())
        if isinstance(decision, Reply):
            heard_at = self.listener.speech_ended_at(utterance)
            self.replies.queue(TurnRequest(user_text=decision.text, heard_at=heard_at), stamps)
            return
        log.info("%s: empty turn → %s", self.name, decision)
        if isinstance(decision, Prompt | GiveUp):
            words = self._agent.render_prompt(self._session_key, decision.kind, decision.count)
            request = TurnRequest(prompt_text=words, close_after=isinstance(decision, GiveUp))
            self.replies.queue(request, stamps)
        elif isinstance(decision, Silence) and mode is ListenMode.AUTO and self._wants_listening:
            await self._begin(mode, "silent wait")  # not after the device's own `listen stop`
