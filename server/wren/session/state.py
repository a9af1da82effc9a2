"""The device's conversational state as the server sees it (reference §8)."""

from __future__ import annotations

from enum import StrEnum


class DeviceState(StrEnum):
    IDLE = "idle"  # nothing captured, nothing playing
    LISTENING = "listening"  # capturing an utterance
    SPEAKING = "speaking"  # a reply is open (`tts start` sent, `tts stop` not yet)
