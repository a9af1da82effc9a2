"""The frames that flow through a turn: every stage takes frames in and puts frames out.

Three kinds, as in Pipecat:
- data frames carry the turn's content (audio, words, sentences, packets) and are queued in order;
- control frames mark where the stream is (speech began, the speaker paused, the input ended, a stage
  failed). They travel in the same order as the data around them, so a stage always sees "the audio,
  then the pause that followed it";
- system frames (the face to show) must not wait: they overtake the queued frames.
A frame type a stage does not handle is passed on unchanged, so stages can be chained freely.

Frames are small immutable records; the uplink makes several per 60 ms packet, which costs microseconds
next to decoding it.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from enum import StrEnum


class Frame:
    """Base of every frame (for type hints: a stage's input and output)."""

    __slots__ = ()


class DataFrame(Frame):
    __slots__ = ()


class ControlFrame(Frame):
    __slots__ = ()


class SystemFrame(Frame):
    """Must not wait behind data: a `Pipeline` hands it through every stage at once, ahead of the queued
    frames (Pipecat's system frames). Its handling in a stage must be quick."""

    __slots__ = ()


# ---- uplink: device packets → words ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UplinkPacket(DataFrame):
    """One encoded audio packet from the device (the binary frame's payload, header already removed)."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class Pcm(DataFrame):
    """Mono 16-bit little-endian PCM at `rate` Hz."""

    pcm: bytes
    rate: int

    @property
    def duration_ms(self) -> float:
        return len(self.pcm) / 2 / self.rate * 1000


@dataclass(frozen=True, slots=True)
class VoiceActivity(DataFrame):
    """A chunk of 16 kHz audio with the VAD's speech probability for each window that chunk completed."""

    audio: Pcm
    probabilities: tuple[float, ...]
    window_ms: int


class InputEnd(StrEnum):
    """Why an utterance's input ended."""

    SILENCE = "end"  # auto/realtime: the silence window elapsed after speech
    MAX_LENGTH = "max_length"  # the utterance reached vad.max_utterance_s
    NO_SPEECH = "no_speech"  # listening for vad.no_speech_timeout_s without any speech
    LISTEN_STOP = "listen stop"  # the device said so (manual mode, or any mode's explicit stop)


@dataclass(frozen=True, slots=True)
class SpeechOnset(ControlFrame):
    """Speech confirmed (vad.min_speech_ms of it): the recogniser opens; in realtime, the barge-in point."""


@dataclass(frozen=True, slots=True)
class SpeechPause(ControlFrame):
    """vad.pause_ms of silence after speech: a whole-utterance recogniser decodes speculatively now."""


@dataclass(frozen=True, slots=True)
class SpeechResume(ControlFrame):
    """Speech again after a pause: the speculative decode is stale."""


@dataclass(frozen=True, slots=True)
class EndOfInput(ControlFrame):
    """No more audio for this utterance; the recogniser finishes on it."""

    reason: InputEnd
    at: float  # time.monotonic() when the end was detected or asked for
    heard_speech: bool = False  # filled in by the turn detector as the frame passes it
    audio_ms: int = 0


@dataclass(frozen=True, slots=True)
class Utterance(DataFrame):
    """What the uplink made of one utterance."""

    text: str
    heard_speech: bool
    audio_ms: int  # uplink audio received for this utterance
    reason: InputEnd
    ended_at: float  # the EndOfInput's time
    decoded_at: float  # when the recogniser's final words were out
    # No recogniser could be opened (`AsrUnavailable`: `[limits] asr_streams` reached, no ASR worker up):
    # nobody listened, so the session says it is busy instead of "I didn't catch that".
    asr_unavailable: bool = False


@dataclass(frozen=True, slots=True)
class Transcribing(ControlFrame):
    """The utterance is over and a whole-utterance recogniser (Moonshine) is still decoding its words.

    The uplink hands out the decode's future instead of waiting for it, so a listen thread never sits idle
    behind a busy recogniser while every other stream's audio queues up; the session awaits the words on
    the event loop (`wren.pipeline.recognise.settle_async`) and goes on with the `Utterance`."""

    words: Future  # concurrent.futures.Future[str]; an AsrError if the recogniser failed
    heard_speech: bool
    audio_ms: int
    reason: InputEnd
    ended_at: float
    asr_unavailable: bool = False

    def utterance(self, text: str, decoded_at: float) -> Utterance:
        return Utterance(text, self.heard_speech, self.audio_ms, self.reason, self.ended_at, decoded_at,
                         asr_unavailable=self.asr_unavailable)


@dataclass(frozen=True, slots=True)
class StageError(ControlFrame):
    """A stage could not handle one frame (a corrupt packet, a recogniser that died); the stream goes on."""

    stage: str
    error: Exception
    recoverable: bool = True


# ---- downlink: agent → device ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta(DataFrame):
    """A piece of the agent's reply text, as it streams."""

    text: str


@dataclass(frozen=True, slots=True)
class EmotionFrame(SystemFrame):
    """The face to show (reference §5.4 `llm` emotion): at once, not after the audio already queued (the
    agent names "thinking" right before a tool call, and the device should show it while it waits)."""

    name: str


@dataclass(frozen=True, slots=True)
class Sentence(DataFrame):
    """One sentence (or clause) of the reply, to be synthesised; `sentence_start` goes out with its audio."""

    text: str


@dataclass(frozen=True, slots=True)
class Packet(DataFrame):
    """One encoded downlink audio frame, ready for the socket."""

    data: bytes


@dataclass(frozen=True, slots=True)
class EndOfStream(ControlFrame):
    """The producer is done: every stage flushes what it holds and passes this on."""
