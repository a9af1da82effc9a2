"""What a session needs from the outside: a connection to write to, and the process-wide services."""

from __future__ import annotations

import re
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Protocol

from wren.config import Config
from wren.pipeline.batched_executor import BatchedExecutor
from wren.pipeline.hold import HoldAudio
from wren.pipeline.phrase_packets import PhrasePackets
from wren.pipeline.timing import TimingSink
from wren.pipeline.tts_scheduler import TtsScheduler
from wren.session.uplink_rounds import UplinkRounds


class ConnectionClosed(Exception):
    """The socket is gone; the session stops quietly."""


class Connection(Protocol):
    """The transport side of one device socket (implemented by wren.transport.websocket)."""

    async def send_text(self, text: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...

    async def close(self, code: int, reason: str) -> None: ...

    @property
    def closed(self) -> bool: ...


def normalise_phrase(text: str) -> str:
    """Lower-case, punctuation and spacing folded, so "Hi, Wren!" matches the wake word "hi wren"."""
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


@dataclass
class SessionServices:
    """Shared by every session of the process: models are loaded once, executors are shared.

    Two executors keep uplink and downlink CPU work apart, so a burst of TTS synthesis for many
    devices never delays another device's audio decoding/VAD/ASR (and vice versa).
    """

    config: Config
    speech: Any  # wren.speech.SpeechStack (vad, asr, tts)
    agent: Any  # wren.agent.loop.AgentLoop
    listen_executor: BatchedExecutor  # decode, VAD, ASR accept/finish: one short job per uplink frame
    speak_executor: Executor  # TTS synthesis, resampling, encoding
    wake_words: frozenset[str] = field(default_factory=frozenset)
    timing: TimingSink | None = None  # gets every turn record and uplink lag (the server's /metrics)
    # Orders the synthesis jobs of all sessions on the speak workers by deadline
    # (wren.pipeline.tts_scheduler); one per process. Made here from `speak_executor` if none is given.
    tts_scheduler: TtsScheduler | None = None
    # Cached phrases' packets per downlink format (wren.pipeline.phrase_packets); one per process. Made here.
    phrase_packets: PhrasePackets | None = None
    # The hold phrase's packets, one of those phrases (wren.pipeline.hold); one per process. Made here.
    hold_audio: HoldAudio | None = None
    # Every session's audio frames of one loop iteration, fed in one call from the socket readers when the
    # uplink runs on the loop (wren.session.uplink_rounds); one per process. Made here if none is given.
    uplink_rounds: UplinkRounds = field(default_factory=UplinkRounds)

    def __post_init__(self) -> None:
        if self.tts_scheduler is None:
            self.tts_scheduler = TtsScheduler(self.speak_executor, self.config.server.speak_workers)
        if self.phrase_packets is None:
            self.phrase_packets = PhrasePackets(self.speech.tts)
        if self.hold_audio is None:
            self.hold_audio = HoldAudio(self.phrase_packets)

    def is_wake_word(self, text: str) -> bool:
        return normalise_phrase(text) in self.wake_words
