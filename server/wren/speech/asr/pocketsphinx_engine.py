"""pocketsphinx 5 streaming recogniser (bundled en-US acoustic model, dictionary and trigram LM by default).

Cepstral mean normalisation (CMN): pocketsphinx normalises features by a running cepstral mean that it
updates as it hears speech and carries across utterances of the same Decoder. A fresh decoder starts from the
model's `cmninit` (40,3,-1), far from real speech, so its first utterance decoded differently from later ones
(e.g. "what can you do" → "what he needed" on a fresh decoder, correct once warmed). And because pooled
decoders serve every device in turn, carrying one device's mean into another device's utterance is wrong too.
So a stream starts from one of two means, never from another device's:
- the mean this *speaker* (the session passes its device id) ended its previous utterance with, because a
  device's microphone, room and noise floor stay the same between turns, and adapting to them matters: with
  white noise at 20 dB SNR, word errors fell from 80 % (always starting from the prior) to 36 % once the
  mean had adapted to that device;
- otherwise (a device's first turn) `BUNDLED_MODEL_CMN_PRIOR`: the mean the bundled model converges to on
  ordinary speech at normal level (measured with piper speech). The first utterance of a fresh engine then
  decodes like any other, and levels from 5 % to 50 % of full scale decode the same (checked in tests).
Within the utterance pocketsphinx still adapts the mean live.

Search settings are the model defaults on purpose. On 30 piper-spoken command-like sentences (streamed in
60 ms chunks) the defaults gave 9.6 % word errors; every variation tried was worse or no better: lw 5/8/10
(12.2/16.7/29.5 %), wider beams (12.2 %, 50 % slower), narrower beams (25 %), topn 8 (11.5 %), no fwdflat
(11.5 %), no bestpath (14.7 %), wip/pip/maxhmmpf/remove_noise changes (9.6 %). `topn=2, maxhmmpf=3000`
cut RTF 0.206 → 0.130 but raised word errors on 30 piper sentences from 10.9 % to 14.6 % ("turn the volume
up" → "turn the ball you know up"), so it is not used. Errors cluster on the first
word ("turn on" → "on on", "pause" → "cause"); a keyword grammar for device commands would help those but
would close the open vocabulary, so none is set here. Noise is pocketsphinx's weak point (see above): a
stronger engine is vosk with a user-supplied model.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pocketsphinx

from wren.speech.asr.bias import STRONG_MARGIN, PhraseBias
from wren.speech.asr.cap import Slot, StreamCap
from wren.speech.asr.cmn import SpeakerCmnCache
from wren.speech.asr.errors import AsrError
from wren.speech.asr.pool import RecogniserPool
from wren.speech.asr.text import clean_transcript

log = logging.getLogger(__name__)

# Phrase bias by n-best (see PocketsphinxStream.bias): distinct hypotheses considered, and entries read.
NBEST_STRONG, NBEST_WEAK, NBEST_SCAN = 8, 3, 60
MIN_ADAPT_SAMPLES = 16000 * 3 // 10  # an utterance shorter than 0.3 s says too little about the channel

# The bundled en-US model's cepstral mean after warm-up on several ordinary sentences (13 coefficients).
BUNDLED_MODEL_CMN_PRIOR = (
    "48.87,7.567,1.001,2.546,0.2802,-2.641,1.876,-2.908,-3.883,6.698,-3.522,7.107,-6.106"
)


def _custom_model_config(model_path: str) -> dict[str, str]:
    """`model_path` names a folder holding an acoustic model (mdef, means, ...) plus one `*.dict` and one
    language model (`*.lm.bin` or `*.lm`), either in the folder or its parent."""
    folder = Path(model_path)
    if not (folder / "mdef").exists():
        raise AsrError(f"pocketsphinx model_path {model_path!r} has no acoustic model (mdef missing)")

    def find(patterns: tuple[str, ...]) -> str:
        for base in (folder, folder.parent):
            for pattern in patterns:
                matches = sorted(base.glob(pattern))
                if matches:
                    return str(matches[0])
        raise AsrError(f"pocketsphinx model_path {model_path!r}: no {' or '.join(patterns)} found")

    return {"hmm": str(folder), "dict": find(("*.dict",)), "lm": find(("*.lm.bin", "*.lm"))}


class PocketsphinxEngine:
    name = "pocketsphinx"
    sample_rate = 16000

    def __init__(
        self, model_path: str = "", pool_size: int = 2, max_idle: int | None = None, max_streams: int = 0,
        **decoder_options: object,
    ) -> None:
        # At most `max_streams` decoders in use (the ceiling, `wren.speech.asr.cap`; 0 = no limit): with the
        # pool's idle ones, at most max(pool_size, max_streams) decoders ever exist (≈90 MB each).
        self.streams = StreamCap(max_streams, self.name)
        self._options: dict[str, object] = {"samprate": self.sample_rate, "loglevel": "FATAL"}
        if model_path:
            self._options.update(_custom_model_config(model_path))
            self.cmn_prior: str | None = None  # another model: trust its own cmninit
        else:
            self.cmn_prior = BUNDLED_MODEL_CMN_PRIOR
        self._options.update(decoder_options)
        self._speaker_cmn = SpeakerCmnCache()  # the same cache the worker supervisor keeps (cmn.py)
        started = time.perf_counter()
        try:
            self._pool: RecogniserPool[pocketsphinx.Decoder] = RecogniserPool(
                self._new_decoder, pool_size, max_idle
            )
        except (RuntimeError, ValueError, KeyError) as exc:
            raise AsrError(f"pocketsphinx failed to load: {exc}") from exc
        log.info("pocketsphinx: %d decoders warm in %.2f s", pool_size, time.perf_counter() - started)

    def _new_decoder(self) -> pocketsphinx.Decoder:
        return pocketsphinx.Decoder(**self._options)

    @property
    def pool(self) -> RecogniserPool[pocketsphinx.Decoder]:
        return self._pool

    def open_stream(self, speaker: str | None = None) -> PocketsphinxStream:
        """A stream on a warm decoder. `speaker` (e.g. the device id) lets the stream start from the cepstral
        mean that speaker's previous utterance ended with (see the module docstring). `AsrUnavailable` past
        the stream ceiling."""
        slot = self.streams.take()
        try:
            return PocketsphinxStream(self, self._pool.acquire(), speaker, slot)
        except BaseException:
            slot.release()
            raise

    def initial_cmn(self, speaker: str | None) -> str | None:
        """The cepstral mean a new stream for `speaker` starts from (None: the model's own cmninit)."""
        if speaker is not None:
            cmn = self._speaker_cmn.recall(speaker)
            if cmn is not None:
                return cmn
        return self.cmn_prior

    def speaker_cmn(self, speaker: str) -> str | None:
        """The mean `speaker`'s last utterance ended with, if remembered (passed between processes)."""
        return self._speaker_cmn.get(speaker)

    def remember_cmn(self, speaker: str, cmn: str) -> None:
        self._speaker_cmn.remember(speaker, cmn)

    def forget_speaker(self, speaker: str) -> None:
        self._speaker_cmn.forget(speaker)


class PocketsphinxStream:
    """One utterance on a borrowed decoder. Not thread-safe: one thread at a time."""

    def __init__(
        self, engine: PocketsphinxEngine, decoder: pocketsphinx.Decoder, speaker: str | None = None,
        slot: Slot | None = None,
    ) -> None:
        self._engine = engine
        self._decoder: pocketsphinx.Decoder | None = decoder
        self.speaker = speaker
        self._slot = slot  # its place under the engine's stream ceiling, given back at close()
        if slot is not None:
            slot.held_by(self)
        self._in_utterance = False
        self._final: str | None = None
        self._odd_byte = b""
        self._broken = False  # a decoder that raised is dropped, never handed to the next device
        self._vocabulary: frozenset[str] = frozenset()
        self._nbest = 0
        self.samples = 0

    def _start(self) -> pocketsphinx.Decoder:
        decoder = self._decoder
        if decoder is None:
            raise AsrError("ASR stream used after close()")
        if not self._in_utterance:
            initial = self._engine.initial_cmn(self.speaker)
            if initial:
                decoder.set_cmn(initial)
            decoder.start_utt()
            self._in_utterance = True
        return decoder

    def accept(self, pcm: bytes) -> None:
        """Feed 16 kHz int16 mono PCM; the search advances now, so finish() has little left to do."""
        if self._final is not None:
            raise AsrError("ASR stream already finished")
        decoder = self._start()
        data = self._odd_byte + bytes(pcm)
        if len(data) % 2:
            data, self._odd_byte = data[:-1], data[-1:]
        else:
            self._odd_byte = b""
        if data:
            try:
                decoder.process_raw(data, False, False)
            except RuntimeError as exc:
                self._broken = True
                raise AsrError(f"pocketsphinx failed while decoding: {exc}") from exc
            self.samples += len(data) // 2

    def bias(self, phrases: tuple[str, ...], margin: float) -> None:
        """Prefer, among the decoder's best hypotheses, the one with more words Wren can act on (the
        phrase set of `wren.agent.vocabulary`): the top `NBEST_STRONG` with a strong margin (the built-in
        agent), the top `NBEST_WEAK` with a weak one (an LLM engine: only near-ties flip), none at 0."""
        self._vocabulary = frozenset(PhraseBias(phrases, margin).vocabulary) if margin > 0 else frozenset()
        self._nbest = 0 if margin <= 0 else NBEST_STRONG if margin >= STRONG_MARGIN else NBEST_WEAK

    def partial(self) -> str:
        if self._final is not None:
            return self._final
        if self._decoder is None or not self._in_utterance:
            return ""
        hyp = self._decoder.hyp()
        return clean_transcript(hyp.hypstr) if hyp else ""

    def finish(self) -> str:
        """End the utterance and return the final transcript ("" for silence). Idempotent."""
        if self._final is not None:
            return self._final
        decoder = self._start()
        try:
            decoder.end_utt()
        except RuntimeError as exc:
            self._broken = True
            raise AsrError(f"pocketsphinx failed to end the utterance: {exc}") from exc
        self._in_utterance = False
        hyp = decoder.hyp()
        self._final = clean_transcript(hyp.hypstr) if hyp else ""
        if self._final and self._vocabulary:
            self._final = self._biased(decoder, self._final)
        if self.speaker is not None and self.samples >= MIN_ADAPT_SAMPLES:
            self._engine.remember_cmn(self.speaker, decoder.get_cmn(False))
        return self._final

    def _biased(self, decoder: pocketsphinx.Decoder, best: str) -> str:
        """The first of the top hypotheses with more phrase-set words than the best one (else the best)."""
        def hits(text: str) -> int:
            return sum(1 for word in text.split() if word in self._vocabulary)

        seen, chosen, chosen_hits = {best}, best, hits(best)
        try:
            for hypothesis, _ in zip(decoder.nbest(), range(NBEST_SCAN), strict=False):
                text = clean_transcript(hypothesis.hypstr)
                if text in seen:
                    continue
                seen.add(text)
                if hits(text) > chosen_hits:
                    chosen, chosen_hits = text, hits(text)
                if len(seen) > self._nbest:
                    break
        except RuntimeError:  # no lattice for this utterance: keep the best hypothesis
            return best
        return chosen

    def close(self) -> None:
        """Return the decoder to the pool (ending an abandoned utterance first). Idempotent."""
        decoder, self._decoder = self._decoder, None
        if self._slot is not None:
            self._slot.release()  # a broken decoder is dropped below: its slot is free all the same
        if decoder is None or self._broken:
            return
        if self._in_utterance:
            try:
                decoder.end_utt()
            except RuntimeError:
                return  # a decoder in an unknown state is not worth keeping
        self._engine.pool.release(decoder)

    def __enter__(self) -> PocketsphinxStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
