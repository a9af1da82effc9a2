"""The `moonshine` ASR engine: one shared model, utterances decoded speculatively at pauses.

Moonshine is not a streaming model: all its work happens on the audio it is given. So that a person does
not wait for it after they stop, a stream decodes what it has whenever the speaker pauses (`pause()`,
called by the session's VAD after a short silence), in the background. If the speaker stays quiet until the
end of the utterance, `finish()` returns that result (waiting only for the part of it still running); if
they spoke again (`resume()`), the guess is discarded and the next pause makes a new one. Audio after the
last pause is silence by the VAD's judgement and is not decoded again. Without any pause (push-to-talk
released mid-word), `finish()` decodes everything at once, ahead of all speculative work.

Long utterances are windowed, never dropped: at a pause once the current window holds `COMMIT_AFTER_S`
of audio, that window is decoded for good and a new one starts; a window that reaches `MAX_WINDOW_S`
without a pause is cut at its quietest 20 ms in the last `CUT_SEARCH_S`. The final text joins the windows.

Thread-safety: as every AsrStream, one stream is used by one thread at a time; decodes run on the engine's
`DecodeScheduler` threads and only hand results back through futures.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wren.speech.asr.bias import PhraseBias
from wren.speech.asr.cap import Slot, StreamCap
from wren.speech.asr.errors import AsrError
from wren.speech.asr.moonshine.model import MAX_WINDOW_S, SAMPLE_RATE, MoonshineModel, Use
from wren.speech.asr.moonshine.scheduler import (
    COMMIT,
    MAX_WAITING_SPECULATIVE,
    SPECULATIVE,
    URGENT,
    DecodeScheduler,
    thread_plan,
)

log = logging.getLogger(__name__)

COMMIT_AFTER_S = 6.0
CUT_SEARCH_S = 3.0
CUT_FRAME = SAMPLE_RATE // 50  # 20 ms
RESULT_TIMEOUT_S = 60.0
DRAFT_EVERY_S = 0.8  # while speaking, guess again after this much new audio (drafts for the final decode)
MAX_PHRASE_SETS = 64  # least recently used phrase sets are dropped first


@dataclass
class EngineStats:
    streams: int = 0
    speculative_runs: int = 0
    speculation_used: int = 0  # finish() answered from a speculative result
    urgent_runs: int = 0  # finish() had to decode
    drafted_runs: int = 0  # ... starting from the tokens of an earlier guess
    windows_committed: int = 0


class MoonshineEngine:
    name = "moonshine"
    sample_rate = SAMPLE_RATE
    feeds_without_blocking = True  # decodes run on the scheduler's threads; the words come by finish_later()

    def __init__(
        self, model_folder: Path, threads: int = 0, max_speculative: int = MAX_WAITING_SPECULATIVE,
        max_streams: int = 0,
    ) -> None:
        started = time.perf_counter()
        self.streams = StreamCap(max_streams, self.name)  # [limits] asr_streams (0 = no limit)
        self.model = MoonshineModel(model_folder)
        self.threads, spill = thread_plan(threads)
        self.scheduler = DecodeScheduler(self.threads, max_speculative, spill_threads=spill)
        self.stats = EngineStats()
        self._stats_lock = threading.Lock()
        self._biases: OrderedDict[tuple[tuple[str, ...], float], PhraseBias] = OrderedDict()
        log.info("moonshine: model loaded in %.2f s, %d decode threads (+%d for urgent work)",
                 time.perf_counter() - started, self.threads, spill)

    def open_stream(self, speaker: str | None = None) -> MoonshineStream:
        if self.scheduler.closed:
            raise AsrError("the Moonshine engine is closed")
        slot = self.streams.take()  # AsrUnavailable past [limits] asr_streams
        self.count("streams")
        return MoonshineStream(self, speaker, slot)

    def count(self, field: str) -> None:
        with self._stats_lock:
            setattr(self.stats, field, getattr(self.stats, field) + 1)

    def decode(
        self, pcm: bytes, priority: int, bias: PhraseBias | None = None, draft: list[int] | None = None,
        use: Use | Callable[[], Use] = Use.COMMAND,
    ) -> Future:
        """Schedule the transcription of int16 PCM (copied now: the caller's buffer may grow); the future's
        result is a `Transcript` (`use`: see MoonshineModel.transcribe)."""
        audio = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        return self.scheduler.submit(lambda: self.model.transcribe(audio, bias, draft, use), priority)

    def phrase_bias(self, phrases: tuple[str, ...], margin: float) -> PhraseBias:
        """One PhraseBias per distinct phrase set (sessions of similar devices share it)."""
        key = (phrases, margin)
        with self._stats_lock:
            bias = self._biases.get(key)
            if bias is not None:
                self._biases.move_to_end(key)
                return bias
        bias = PhraseBias(phrases, margin)
        with self._stats_lock:
            self._biases[key] = bias
            while len(self._biases) > MAX_PHRASE_SETS:
                self._biases.popitem(last=False)
        return bias

    def close(self) -> None:
        self.scheduler.close()


class _Guess:
    """A background decode of the window so far: a draft while speaking, or `final`, made at a pause as the
    end would be decoded. Its decode asks what it is for (`use`) once its greedy search is done; until then:
    - a draft becomes final when the pause comes at its very end (`make_final`): one decode, not two at once
      (push-to-talk in the bench hit this in 4 turns of 16, each decode slowed by the other);
    - a guess the speaker spoke past (`superseded`: resumed, or a newer guess) keeps only its tokens, the
      next decode's draft: no rescoring and no grammar, ≈ half of a short question's decode."""

    def __init__(self, end: int, final: bool, windowed: bool) -> None:
        self.end = end  # samples of the window it covers, from the window's start
        self.final = final
        self.future: Future = Future()  # replaced by the decode's own future once it is submitted
        self._windowed = windowed  # earlier windows of the utterance are committed: no command grammar
        self._superseded = False
        self._settled = False  # the decode has asked `use`: nothing changes it any more
        self._lock = threading.Lock()  # the uplink's thread changes it, a decode thread settles it

    def use(self) -> Use:
        with self._lock:
            self._settled = True
            if self._superseded or not self.final:
                return Use.DRAFT
            return Use.WORDS if self._windowed else Use.COMMAND

    def make_final(self) -> bool:
        """Whether this is (now) the guess at the pause: False once a draft's decode has settled."""
        with self._lock:
            if not self._settled and not self._superseded:
                self.final = True
            return self.final

    def superseded(self) -> None:
        with self._lock:
            self._superseded = True


class MoonshineStream:
    def __init__(self, engine: MoonshineEngine, speaker: str | None, slot: Slot | None = None) -> None:
        self._engine = engine
        self.speaker = speaker
        self._slot = slot  # its place under the engine's stream ceiling, given back at close()
        if slot is not None:
            slot.held_by(self)
        # The current window only (older windows are committed): ≈MAX_WINDOW_S at most, cut there.
        self._pcm = bytearray()
        self._odd_byte = b""
        # One decode per committed window, in order: a few per utterance, whose length the session caps.
        self._windows: list[Future] = []
        self._guess: _Guess | None = None
        self._pause_at: int | None = None  # samples into the window at the last pause (None: speaking)
        self._final: str | None = None
        self._words: Future | None = None  # finish_later()'s, once asked for
        self._closed = False
        self._bias: PhraseBias | None = None
        self._draft: list[int] = []  # tokens of the newest finished guess of this window
        self._generation = 0  # counts windows, so a late guess of an old window is not taken as a draft
        self._drafting = True  # guess while speaking too (see drafts())

    # ---- AsrStream ---------------------------------------------------------------------------

    def accept(self, pcm: bytes) -> None:
        self._check()
        data = self._odd_byte + bytes(pcm)
        if len(data) % 2:
            data, self._odd_byte = data[:-1], data[-1:]
        else:
            self._odd_byte = b""
        self._pcm += data
        window = len(self._pcm) // 2
        if window >= MAX_WINDOW_S * SAMPLE_RATE:
            self._cut_window()
        elif (self._drafting and self._pause_at is None
              and window - self._guessed_end() >= DRAFT_EVERY_S * SAMPLE_RATE):
            self._guess_now(window, final=False)  # while speaking: a draft, so the end needs fewer steps

    def pause(self) -> None:
        """The speaker paused: decode what there is, in the background (a no-op if nothing is new)."""
        if self._closed or self._final is not None:
            return
        window = len(self._pcm) // 2
        self._pause_at = window
        guess = self._guess
        if window == 0 or (guess is not None and guess.end == window and guess.final):
            return
        if window >= COMMIT_AFTER_S * SAMPLE_RATE:
            self._commit(window)
            return
        # A draft of this very audio (made by the accept() of the chunk that ended with the pause) becomes
        # the guess if its decode has not reached the grammar yet; else it is no answer (it skipped the
        # grammar) and the audio is decoded again. Push-to-talk in the bench hit this in 4 turns of 16:
        # two decodes of the same audio at once, each slowed by the other, with the person about to wait.
        if guess is not None and guess.end == window and guess.make_final():
            return
        self._guess_now(window, final=True)

    def bias(self, phrases: tuple[str, ...], margin: float) -> None:
        """Prefer these words where the model finds them about as likely (`moonshine.bias`); margin in nats
        per replaced word, 0 = off."""
        self._bias = self._engine.phrase_bias(phrases, margin) if phrases and margin > 0 else None

    def drafts(self, enabled: bool) -> None:
        """Whether to guess while the person is still speaking, every DRAFT_EVERY_S of new audio. A draft
        only saves decoder steps in a later decode of the same audio: worth it when the end may come at
        once (push-to-talk released), waste when the end is a VAD silence that the guess at the pause has
        hundreds of milliseconds to fill (auto and realtime modes: about 40% of Moonshine's CPU)."""
        self._drafting = enabled

    def resume(self) -> None:
        """The speaker spoke again after a pause: the audio after it must be decoded too."""
        self._pause_at = None
        if self._guess is not None:
            self._guess.superseded()  # never the answer now: its words are only a draft

    def partial(self) -> str:
        if self._final is not None:
            return self._final
        guess = self._guess
        if guess is not None and guess.future.done() and not guess.future.cancelled():
            with contextlib.suppress(Exception):
                return self._joined([*self._window_texts(), guess.future.result().text])
        return self._joined(self._window_texts())

    def finish(self) -> str:
        """The final transcript ("" for silence), waiting for it. Idempotent."""
        words = self.finish_later()
        try:
            return str(words.result(RESULT_TIMEOUT_S))
        except TimeoutError:
            raise AsrError(f"Moonshine did not finish decoding within {RESULT_TIMEOUT_S:.0f} s") from None
        except CancelledError:
            raise AsrError("a Moonshine decode was cancelled (the engine is closing)") from None

    def finish_later(self) -> Future:
        """The final transcript as a future, without waiting (`wren.pipeline.recognise`): it completes on a
        decode thread when the last window and the tail are decoded, or fails with an AsrError. Close the
        stream only once it is done (closing cancels the decodes it waits for)."""
        if self._words is not None:
            return self._words
        self._check()
        words: Future = Future()
        self._words = words
        end = self._pause_at if self._pause_at is not None else len(self._pcm) // 2
        parts = [*self._windows, *([self._tail_future(end)] if end > 0 else [])]
        left = len(parts)
        lock = threading.Lock()

        def part_done(_: Future) -> None:
            nonlocal left
            with lock:
                left -= 1
                if left:
                    return
            try:
                texts = [_text(part) for part in parts]
            except AsrError as exc:
                words.set_exception(exc)
                return
            # Decoded up to a pause, the model may end on a comma ("Turn on the light,"): it is the end.
            self._final = re.sub(r"[,;:]+$", ".", self._joined(texts))
            words.set_result(self._final)

        if not parts:
            self._final = ""
            words.set_result("")
        for part in parts:
            part.add_done_callback(part_done)
        return words

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._drop_guess()
        for future in self._windows:
            future.cancel()
        self._pcm = bytearray()
        if self._slot is not None:
            self._slot.release()

    def __enter__(self) -> MoonshineStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- windows and guesses -------------------------------------------------------------------

    def _tail_future(self, end: int) -> Future:
        guess = self._guess
        if guess is not None and guess.end == end and guess.final:
            if guess.future.cancel():  # still waiting behind other work: decode it now, urgently
                self._guess = None
            else:
                self._engine.count("speculation_used")
                return guess.future
        self._drop_guess()
        self._engine.count("urgent_runs")
        if self._draft:
            self._engine.count("drafted_runs")
        return self._engine.decode(bytes(self._pcm[: end * 2]), URGENT, self._bias, self._draft,
                                   use=Use.WORDS if self._windows else Use.COMMAND)

    def _guessed_end(self) -> int:
        return self._guess.end if self._guess is not None else 0

    def _guess_now(self, window: int, final: bool) -> None:
        """Decode the window so far in the background; its tokens become the draft of later decodes. Only
        a `final` guess (at a pause) may be the answer, so only it is matched against the command grammar:
        a draft's words are no command yet, and long utterances (committed windows) are none."""
        self._drop_guess()
        guess = _Guess(window, final, windowed=bool(self._windows))
        guess.future = future = self._engine.decode(bytes(self._pcm), SPECULATIVE, self._bias, self._draft,
                                                    use=guess.use)
        self._guess = guess
        self._engine.count("speculative_runs")
        generation = self._generation
        future.add_done_callback(lambda done: self._take_draft(done, generation))

    def _take_draft(self, future: Future, generation: int) -> None:
        """Runs on a decode thread: keep the tokens unless the window changed meanwhile."""
        if generation == self._generation and not future.cancelled() and future.exception() is None:
            self._draft = future.result().tokens

    def _commit(self, end: int) -> None:
        self._drop_guess()
        window = bytes(self._pcm[: end * 2])
        self._windows.append(self._engine.decode(window, COMMIT, self._bias, self._draft, use=Use.WORDS))
        self._engine.count("windows_committed")
        self._generation += 1  # a new window: drafts of the old one no longer apply
        self._draft = []
        del self._pcm[: end * 2]
        self._pause_at = 0 if self._pause_at is not None else None

    def _cut_window(self) -> None:
        """The window reached MAX_WINDOW_S with no pause: commit up to its quietest recent 20 ms."""
        samples = np.frombuffer(bytes(self._pcm), dtype="<i2").astype(np.float32)
        start = max(0, len(samples) - int(CUT_SEARCH_S * SAMPLE_RATE))
        usable = (len(samples) - start) // CUT_FRAME * CUT_FRAME
        frames = samples[start : start + usable].reshape(-1, CUT_FRAME)
        quietest = int(np.argmin(np.mean(frames * frames, axis=1)))
        self._commit(start + quietest * CUT_FRAME + CUT_FRAME // 2)

    def _drop_guess(self) -> None:
        if self._guess is not None:
            self._guess.superseded()  # if its decode is running already, it finishes as a draft
            self._guess.future.cancel()
            self._guess = None

    def _window_texts(self) -> list[str]:
        done = [f for f in self._windows if f.done() and not f.cancelled() and f.exception() is None]
        return [f.result().text for f in done]

    @staticmethod
    def _joined(texts: list[str]) -> str:
        return " ".join(t for t in texts if t).strip()

    def _check(self) -> None:
        if self._closed:
            raise AsrError("ASR stream used after close()")
        if self._final is not None:
            raise AsrError("ASR stream already finished")


def _text(future: Future) -> str:
    """A finished decode's text; its failure as an AsrError."""
    try:
        return str(future.result(0).text)
    except CancelledError:
        raise AsrError("a Moonshine decode was cancelled (the engine is closing)") from None
    except AsrError:
        raise
    except Exception as exc:  # onnxruntime's own error types
        raise AsrError(f"Moonshine failed to decode: {type(exc).__name__}: {exc}") from exc
