"""The listen-state machine, as one table: what every message does in every state and listen mode.

The session looks the action up here (`action(event, state, mode)`) and carries it out; docs/protocol.md
shows the same table (`markdown_table()`, checked by a test), so the code and the document cannot drift.

States are the server's view: is an utterance being captured (listening), is a reply in progress (being
prepared, spoken or waiting: speaking)? Both at once happens in realtime mode (the mic never stops) and when
a device starts listening while a reply still plays.

Leniency (docs/protocol.md, "Leniency"): an auto or realtime device is listening again after `tts stop`
without sending a new `listen start` (reference §5.1: auto devices send one anyway, realtime ones never do),
unless it said `listen stop`; an empty binary frame while listening ends the utterance like `listen stop`
(browser clients mark the end of a recording that way); a typed query in realtime mode restarts the
utterance instead of ending listening (the mic keeps streaming).
"""

from __future__ import annotations

from enum import StrEnum

from wren.pipeline.turn_detection import ListenMode


class ListenEvent(StrEnum):
    START = "listen start"
    STOP = "listen stop"
    WAKE_WORD = "listen detect (wake word)"
    TYPED = "listen detect (typed text)"
    AUDIO = "binary audio"
    END_MARK = "empty binary frame"
    ABORT = "abort"
    ONSET = "speech onset (VAD)"
    INPUT_END = "silence after speech or max length (VAD)"
    NO_SPEECH = "no speech for no_speech_timeout_s (VAD)"
    REPLY_ENDED = "reply ended (tts stop sent)"


class ListenState(StrEnum):
    IDLE = "idle"
    LISTENING = "listening"
    SPEAKING = "speaking"  # a reply is in progress: being prepared, spoken, or waiting its turn
    BOTH = "listening + speaking"

    @staticmethod
    def of(listening: bool, speaking: bool) -> ListenState:
        if listening and speaking:
            return ListenState.BOTH
        if listening:
            return ListenState.LISTENING
        return ListenState.SPEAKING if speaking else ListenState.IDLE


class Action(StrEnum):
    BEGIN = "begin (the message's mode)"  # a fresh utterance: new VAD context, recogniser at onset
    BEGIN_AGAIN = "begin again (same mode)"
    END = "end: answer, or empty-input rule"  # finish the utterance; its words are answered
    END_THEN_AGAIN = "end, then begin again"  # realtime: the mic keeps streaming
    FEED = "feed the uplink"
    ANSWER = "answer (after the reply)"
    ABANDON_AND_ANSWER = "drop the utterance, answer"
    RESTART_AND_ANSWER = "begin again, answer"
    CANCEL_REPLY = "cancel the reply, tts stop"
    ANSWER_STOP = "tts stop"  # always answer an abort: the device may wait for it
    BARGE_IN = "barge-in: cancel the reply"
    TOUCH = "activity"
    RESUME = "listen again (if it was listening)"  # unless the device said `listen stop`
    NOTHING = "—"
    DROP = "dropped, counted"


IDLE, LISTENING, SPEAKING, BOTH = ListenState
ALL = (IDLE, LISTENING, SPEAKING, BOTH)
NOT_LISTENING = (IDLE, SPEAKING)
CAPTURING = (LISTENING, BOTH)

# (event, states) → (auto, manual, realtime)
_RULES: list[tuple[ListenEvent, tuple[ListenState, ...], tuple[Action, Action, Action]]] = [
    (ListenEvent.START, ALL, (Action.BEGIN,) * 3),
    (ListenEvent.STOP, CAPTURING, (Action.END,) * 3),
    (ListenEvent.STOP, NOT_LISTENING, (Action.NOTHING,) * 3),
    (ListenEvent.WAKE_WORD, ALL, (Action.BEGIN_AGAIN,) * 3),
    (ListenEvent.TYPED, CAPTURING, (Action.ABANDON_AND_ANSWER, Action.ABANDON_AND_ANSWER,
                                    Action.RESTART_AND_ANSWER)),
    (ListenEvent.TYPED, NOT_LISTENING, (Action.ANSWER,) * 3),
    (ListenEvent.AUDIO, CAPTURING, (Action.FEED,) * 3),
    (ListenEvent.AUDIO, NOT_LISTENING, (Action.DROP,) * 3),
    (ListenEvent.END_MARK, CAPTURING, (Action.END,) * 3),
    (ListenEvent.END_MARK, NOT_LISTENING, (Action.NOTHING,) * 3),
    (ListenEvent.ABORT, (SPEAKING, BOTH), (Action.CANCEL_REPLY,) * 3),
    (ListenEvent.ABORT, (IDLE, LISTENING), (Action.ANSWER_STOP,) * 3),
    (ListenEvent.ONSET, (LISTENING,), (Action.TOUCH,) * 3),
    (ListenEvent.ONSET, (BOTH,), (Action.TOUCH, Action.TOUCH, Action.BARGE_IN)),
    (ListenEvent.INPUT_END, CAPTURING, (Action.END, Action.END, Action.END_THEN_AGAIN)),
    (ListenEvent.NO_SPEECH, (LISTENING,), (Action.END, Action.NOTHING, Action.END_THEN_AGAIN)),
    (ListenEvent.NO_SPEECH, (BOTH,), (Action.BEGIN_AGAIN, Action.NOTHING, Action.BEGIN_AGAIN)),
    (ListenEvent.REPLY_ENDED, (IDLE,), (Action.RESUME, Action.NOTHING, Action.RESUME)),
    (ListenEvent.REPLY_ENDED, (LISTENING,), (Action.NOTHING,) * 3),
]
MODES = (ListenMode.AUTO, ListenMode.MANUAL, ListenMode.REALTIME)

TABLE: dict[tuple[ListenEvent, ListenState, ListenMode], Action] = {}
for _event, _states, _actions in _RULES:
    for _state in _states:
        for _mode, _action in zip(MODES, _actions, strict=True):
            TABLE[(_event, _state, _mode)] = _action


def action(event: ListenEvent, state: ListenState, mode: ListenMode) -> Action:
    """What `event` does in `state` and `mode`; a cell the table leaves out cannot happen (→ NOTHING)."""
    return TABLE.get((event, state, mode), Action.NOTHING)


def markdown_table() -> str:
    """The table as docs/protocol.md shows it: one row per event and state, one column per mode."""
    lines = ["| message or event | state | auto | manual | realtime |", "|---|---|---|---|---|"]
    for event, states, actions in _RULES:
        cells = " | ".join(a.value for a in actions)
        lines.append(f"| {event.value} | {', '.join(s.value for s in states)} | {cells} |")
    return "\n".join(lines)
