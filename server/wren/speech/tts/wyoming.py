"""`[tts] engine = "wyoming"`: synthesis by a Wyoming server (wyoming-piper, `wren wyoming`, ...).

Wren hands the TTS one sentence at a time (wren.pipeline.synthesise), so each `synthesize(text)` is one
`Synthesize` request on its own connection, and its audio is yielded chunk by chunk as the server streams
`AudioChunk`s (wyoming-piper sends a sentence's audio as soon as that sentence is synthesised), converted to
int16 mono at `sample_rate`. The server's rate is only known from its `AudioStart`, while the downlink is
built before the first request, so the engine promises a fixed rate (piper's 22,050 Hz: no conversion with
wyoming-piper's medium voices) and resamples anything else to it.

Failures are `TtsError`: a server that is down (at once while the link backs off, wren.speech.wyoming),
one that hangs up, says `error`, or sends nothing for `[tts] timeout_s`. The synthesise stage then skips
that sentence and the turn goes on to its `tts stop` as with any TTS failure.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.tts import Synthesize, SynthesizeVoice

from wren.config import TtsConfig
from wren.speech.sentences import clean_for_speech
from wren.speech.tts.base import TtsError
from wren.speech.wyoming import PcmConverter, WyomingLink

log = logging.getLogger(__name__)

SAMPLE_RATE = 22050


class WyomingTtsEngine:
    name = "wyoming"
    sample_rate = SAMPLE_RATE

    def __init__(self, uri: str, voice: str = "", timeout_s: float = 10.0) -> None:
        self.link = WyomingLink(uri, timeout_s, TtsError, "TTS")
        self.voice = voice.strip()
        info = self.link.describe()  # logged only: a server that is down now may be up by the first turn
        if info is not None:
            voices = [v.name for program in info.tts for v in program.voices]
            if not info.tts:
                log.warning("wyoming: %s describes no TTS program (is it an ASR server?)", self.link.address)
            elif self.voice and self.voice not in voices:
                log.warning("wyoming: %s has no voice %r (it has %d others); it will use its default",
                            self.link.address, self.voice, len(voices))
            else:
                log.info("wyoming: TTS server %s: %s, voice %s", self.link.address,
                         ", ".join(p.name for p in info.tts), self.voice or "(its default)")

    def synthesize(self, text: str) -> Iterator[bytes]:
        """int16 PCM of `text` as the server streams it (markdown and emoji stripped first, as for piper)."""
        speakable = clean_for_speech(text or "")
        if not speakable:
            return
        conn = self.link.connect()
        try:
            voice = SynthesizeVoice(name=self.voice) if self.voice else None
            conn.send(Synthesize(text=speakable, voice=voice).event())
            converter = PcmConverter(self.sample_rate)
            started = False
            while True:
                event = conn.receive()  # each wait bounded by timeout_s: a stalled server ends the sentence
                if AudioStart.is_type(event.type):
                    started = True
                elif AudioChunk.is_type(event.type):
                    pcm = converter.convert(AudioChunk.from_event(event))
                    if pcm:
                        yield pcm
                elif AudioStop.is_type(event.type):
                    tail = converter.flush()
                    if tail:
                        yield tail
                    if not started:
                        log.debug("wyoming: %s sent audio-stop without audio-start", self.link.address)
                    return
        finally:
            conn.close()  # also when the turn is abandoned mid-sentence (the generator is closed)


def load_wyoming_tts(config: TtsConfig) -> WyomingTtsEngine:
    if not config.uri.strip():
        raise TtsError("tts.engine = wyoming needs tts.uri (tcp://host:port of a Wyoming TTS server)")
    return WyomingTtsEngine(config.uri, config.voice, config.timeout_s)
