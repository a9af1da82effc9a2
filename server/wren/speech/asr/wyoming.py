"""`[asr] engine = "wyoming"`: recognition by a Wyoming server (wyoming-faster-whisper, `wren wyoming`, ...).

Per utterance (the recognise stage opens a stream at speech onset): connect, `Transcribe` (the language),
`AudioStart` (16 kHz, 16 bit, mono), one `AudioChunk` per `accept()` as the audio arrives, and at the end
`AudioStop`; the server answers `Transcript`. A server that streams its transcript (`TranscriptStart`,
`TranscriptChunk`..., `TranscriptStop`) works too: the chunks are joined if no `Transcript` comes.

Failures are `AsrError`, which the recognise stage turns into an utterance without words: a server that is
down is `AsrUnavailable` from `open_stream` (at once while the link backs off, wren.speech.wyoming; the
session answers "busy", as when no ASR worker runs); one that hangs up or stops reading mid-utterance, or
sends no transcript within `[asr] timeout_s` after the utterance ended, is the normal no-text path.
`pause()` / `resume()` are not offered (the server decodes as it likes); `partial()` is the streamed text so
far, which is empty for servers that answer only at the end.
"""

from __future__ import annotations

import logging
import time

from wyoming.asr import Transcribe, Transcript, TranscriptChunk, TranscriptStop
from wyoming.audio import AudioChunk, AudioStart, AudioStop

from wren.config import AsrConfig
from wren.speech.asr.cap import Slot, StreamCap
from wren.speech.asr.errors import AsrError, AsrUnavailable
from wren.speech.wyoming import WyomingConnection, WyomingLink

log = logging.getLogger(__name__)

RATE, WIDTH, CHANNELS = 16000, 2, 1


def wyoming_language(language: str) -> str | None:
    """Wren's `en-US` → `en`: Whisper servers take the language alone, and Home Assistant sends it so."""
    primary = (language or "").replace("_", "-").split("-")[0].strip().lower()
    return primary or None


class WyomingAsrStream:
    def __init__(self, conn: WyomingConnection, slot: Slot, language: str | None) -> None:
        self._conn = conn
        self._slot = slot
        self._chunks: list[str] = []
        self._final: str | None = None
        self._closed = False
        self._sent_ms = 0
        try:
            conn.send(Transcribe(language=language).event())
            conn.send(AudioStart(rate=RATE, width=WIDTH, channels=CHANNELS, timestamp=0).event())
        except AsrError:
            self.close()
            raise

    def accept(self, pcm: bytes) -> None:
        self._check()
        if not pcm:
            return
        chunk = AudioChunk(RATE, WIDTH, CHANNELS, audio=bytes(pcm), timestamp=self._sent_ms)
        self._sent_ms += len(pcm) * 1000 // (RATE * WIDTH * CHANNELS)
        self._conn.send(chunk.event())

    def partial(self) -> str:
        return self._final if self._final is not None else " ".join(self._chunks)

    def finish(self) -> str:
        """The server's transcript of the utterance (stripped; "" for silence). Idempotent."""
        if self._final is not None:
            return self._final
        self._check()
        self._conn.send(AudioStop(timestamp=self._sent_ms).event())
        deadline = time.monotonic() + self._conn.timeout_s
        while True:
            event = self._conn.receive(deadline - time.monotonic())
            if Transcript.is_type(event.type):
                self._final = Transcript.from_event(event).text.strip()
                break
            if TranscriptChunk.is_type(event.type):
                self._chunks.append(TranscriptChunk.from_event(event).text.strip())
            elif TranscriptStop.is_type(event.type):
                self._final = " ".join(c for c in self._chunks if c)
                break
            # anything else (transcript-start, a server's own events) says nothing about the words
        self._release()
        return self._final

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._release()

    def _release(self) -> None:
        self._conn.close()
        self._slot.release()

    def _check(self) -> None:
        if self._closed:
            raise AsrError("the Wyoming ASR stream is closed")


class WyomingAsrEngine:
    name = "wyoming"
    sample_rate = RATE

    def __init__(
        self, uri: str, language: str = "en-US", timeout_s: float = 10.0, max_streams: int = 0
    ) -> None:
        self.link = WyomingLink(uri, timeout_s, AsrError, "ASR")
        self.language = wyoming_language(language)
        self.streams = StreamCap(max_streams, self.name)
        info = self.link.describe()  # logged only: a server that is down now may be up by the first turn
        if info is not None:
            programs = [p.name for p in info.asr]
            if programs:
                log.info("wyoming: ASR server %s offers %s", self.link.address, ", ".join(programs))
            else:
                log.warning("wyoming: %s describes no ASR program (is it a TTS server?)", self.link.address)

    def open_stream(self, speaker: str | None = None) -> WyomingAsrStream:
        slot = self.streams.take()  # AsrUnavailable past [limits] asr_streams
        try:
            conn = self.link.connect()
        except AsrError as exc:
            slot.release()
            # Like no ASR worker running: the engine is fine, its server is not there now, so the session
            # answers "busy" rather than "I didn't catch that" (the link has logged it, once).
            raise AsrUnavailable(str(exc)) from exc
        stream = WyomingAsrStream(conn, slot, self.language)
        slot.held_by(stream)
        return stream


def load_wyoming_asr(config: AsrConfig, max_streams: int = 0) -> WyomingAsrEngine:
    if not config.uri.strip():
        raise AsrError("asr.engine = wyoming needs asr.uri (tcp://host:port of a Wyoming ASR server)")
    return WyomingAsrEngine(config.uri, config.language, config.timeout_s, max_streams)
