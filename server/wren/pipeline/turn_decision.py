"""The turn decision: answer the words, or apply the empty-input rule ("hub decides, NLG renders",
seeds/xiaozhi-dialogue-flow.txt).

The session classifies every turn that produced no words, counts them, and decides what to do; the
agent only words a prompt (`agent.render_prompt(session_key, kind, count)`).

Classification (`EmptyKind`):
- MANUAL_PRESS: a push-to-talk press with no speech (or no recognised text).
- NO_SPEECH: auto/realtime listening for `vad.no_speech_timeout_s` without any speech.
- NO_TEXT: auto/realtime speech was heard but the recogniser produced no words.

Decision (`Prompt`, `Silence`, `GiveUp`):
- manual: always Prompt("manual", 1), and the count resets: one prompt per voiceless press, never
  giving up (the user is pressing a button, they are there).
- auto/realtime, rule of three: the count grows on every empty turn and resets on real input.
  At 3 the session gives up: it speaks the final wording (count 3) and closes the connection, which
  sends the device idle. Below 3:
  - listening re-armed by a wake word → Prompt("wake", n) ("Yes? How can I help?");
  - NO_TEXT → Prompt("silence", n): something was said but not understood;
  - NO_SPEECH → Silence: keep listening quietly (the user is simply done after an answer).
A turn that yields no text therefore always lands in exactly one of the three decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from wren.pipeline.turn_detection import ListenMode

GIVE_UP_AFTER = 3


class EmptyKind(StrEnum):
    MANUAL_PRESS = "manual_press"
    NO_SPEECH = "no_speech"
    NO_TEXT = "no_text"


@dataclass(frozen=True)
class Prompt:
    kind: str  # "manual", "silence" or "wake": what the agent words
    count: int  # 1..3


@dataclass(frozen=True)
class Silence:
    pass


@dataclass(frozen=True)
class GiveUp:
    kind: str
    count: int  # the final wording to speak before closing


Decision = Prompt | Silence | GiveUp


class EmptyInputRule:
    def __init__(self) -> None:
        self.empty_count = 0

    def real_input(self) -> None:
        self.empty_count = 0

    def classify(self, mode: ListenMode, heard_speech: bool) -> EmptyKind:
        if mode is ListenMode.MANUAL:
            return EmptyKind.MANUAL_PRESS
        return EmptyKind.NO_TEXT if heard_speech else EmptyKind.NO_SPEECH

    def decide(self, kind: EmptyKind, armed_by_wake: bool) -> Decision:
        if kind is EmptyKind.MANUAL_PRESS:
            self.empty_count = 0
            return Prompt("manual", 1)
        self.empty_count += 1
        count = self.empty_count
        wording = "wake" if armed_by_wake else "silence"
        if count >= GIVE_UP_AFTER:
            self.empty_count = 0
            return GiveUp(wording, GIVE_UP_AFTER)
        if armed_by_wake or kind is EmptyKind.NO_TEXT:
            return Prompt(wording, count)
        return Silence()


@dataclass(frozen=True)
class Reply:
    text: str  # the recognised words: the agent answers them


TurnDecision = Reply | Prompt | Silence | GiveUp


class TurnDecider:
    """What the session does with an utterance: answer its words, or apply the empty-input rule.

    `keep_socket`: something will still speak on this socket (a pending timer), so the rule never says
    goodbye then; it listens quietly instead."""

    def __init__(self) -> None:
        self.rule = EmptyInputRule()
        self.armed_by_wake = False  # listening was (re)armed by a wake word, not a button

    def wake(self) -> None:
        self.armed_by_wake = True

    def typed(self) -> None:
        self.rule.real_input()

    def decide(self, text: str, mode: ListenMode, heard_speech: bool, keep_socket: bool) -> TurnDecision:
        if text:
            self.rule.real_input()
            self.armed_by_wake = False
            return Reply(text)
        decision = self.rule.decide(self.rule.classify(mode, heard_speech), self.armed_by_wake)
        if isinstance(decision, GiveUp) and keep_socket:
            return Silence()
        if isinstance(decision, Prompt | GiveUp):
            self.armed_by_wake = False
        return decision
