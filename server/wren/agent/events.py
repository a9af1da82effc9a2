"""Events a turn yields to its consumer (a voice session speaks TextChunks and shows Emotions)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TextChunk:
    """A piece of the reply text, in order; concatenating all chunks gives the whole reply."""

    text: str


@dataclass(frozen=True)
class Emotion:
    """An emotion name for the device face (xiaozhi `llm` frame), e.g. `happy`, `neutral`, `thinking`."""

    name: str


TurnEvent = TextChunk | Emotion
