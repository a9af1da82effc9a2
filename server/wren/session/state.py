"""The device's conversational state as the server sees it, and the three listen modes."""

from __future__ import annotations

from enum import StrEnum


class DeviceState(StrEnum):
    IDLE = "idle"  # nothing captured, nothing playing
    LISTENING = "listening"  # capturing an utterance
    SPEAKING = "speaking"  # a reply is open (`tts start` sent, `tts stop` not yet)


class ListenMode(StrEnum):
    AUTO = "auto"  # server VAD ends the utterance
    MANUAL = "manual"  # `listen start` / `listen stop` bound it (push-to-talk)
    REALTIME = "realtime"  # like auto, but the mic keeps streaming while speaking: speech barges in

    @property
    def ends_by_vad(self) -> bool:
        return self is not ListenMode.MANUAL
