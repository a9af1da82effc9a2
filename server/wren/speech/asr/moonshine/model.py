"""The Moonshine base-en model on ONNX Runtime, and a greedy decoder with guards against its failure modes.

One `MoonshineModel` per process serves every stream: ONNX Runtime sessions are thread-safe and release
the GIL while they run, so N threads (the engine's scheduler) can transcribe N utterances at once, each
inference on one core (`intra_op_num_threads = 1`: for one short utterance more threads barely help, and
with many speakers they only contend).

Guards (failure modes measured on this model, ../shared/reference/speech-stack-notes.md):
- silence or low noise: audio whose RMS is below `SILENT_DBFS` is not decoded at all ("").
- repeat loops in noise ("cancel the timer cancel the timer ..."): at most `MAX_TOKENS_PER_S` tokens per
  second of audio (+ `EXTRA_TOKENS`), and repeated phrases are trimmed (`trim_repeats`).
- long audio: the caller (the engine) windows utterances longer than `MAX_WINDOW_S`; this class
  decodes what it is given.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np

from wren.speech.asr.bias import GRAMMAR_MARGIN, PhraseBias, prefers_command
from wren.speech.asr.errors import AsrError
from wren.speech.asr.grammar import TokenAutomaton, accepts
from wren.speech.asr.moonshine.constrained import BEAM, Constrained, constrained_search
from wren.speech.asr.moonshine.tokenizer import END_ID, START_ID, MoonshineTokenizer

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
MAX_TOKENS_PER_S = 6.5
EXTRA_TOKENS = 4
MIN_AUDIO_S = 0.25  # shorter clips are padded with silence: the encoder needs a few frames
SILENT_DBFS = -52.0
MAX_WINDOW_S = 10.0
HEADS, HEAD_DIM = 8, 52
ALTERNATIVES = 8  # top tokens per word start considered for phrase-set words
# Nats of leeway when a rescoring candidate is ruled out from the greedy search's logits: its own pass
# quantises activations differently (DynamicQuantizeMatMul scales per call), which moved scores by < 1 nat.
PRUNE_SLACK = 1.5
EMPTY_SELF_CACHE = np.zeros((1, HEADS, 0, HEAD_DIM), np.float32)  # before the first token


def trim_repeats(text: str) -> str:
    """Collapse a phrase (2–8 words) repeated back to back into one, and a word said more than three times
    in a row into one: the decoder's loop in noise. Two words said twice ("no no") are kept."""
    words = re.sub(r"\b(\w+)(?:[ ,]+\1\b){3,}", r"\1", text, flags=re.IGNORECASE).split()
    changed = True
    while changed:
        changed = False
        for size in range(min(8, len(words) // 2), 1, -1):
            for start in range(0, len(words) - 2 * size + 1):
                first = [w.lower().strip(".,!?") for w in words[start : start + size]]
                second = [w.lower().strip(".,!?") for w in words[start + size : start + 2 * size]]
                if first == second:
                    ending = re.search(r"[.,!?]+$", words[start + 2 * size - 1])
                    del words[start + size : start + 2 * size]
                    if ending and not words[start + size - 1].endswith(ending.group()):
                        words[start + size - 1] += ending.group()  # keep the sentence's full stop
                    changed = True
                    break
            if changed:
                break
    return " ".join(words)


QUOTES = "\"'“”‘’«»"


def strip_wrapping_quotes(text: str) -> str:
    """Drop quote marks around the whole transcript (Moonshine sometimes writes `"'What day is it?'`);
    apostrophes inside words ("what's", "o'clock") stay."""
    stripped = text.strip()
    while stripped and stripped[0] in QUOTES:
        stripped = stripped[1:].lstrip()
    while stripped and stripped[-1] in QUOTES and (len(stripped) < 2 or not stripped[-2].isalpha()):
        stripped = stripped[:-1].rstrip()
    return stripped


class Use(Enum):
    """What a decode's result is for: how much of the work after the greedy search it needs."""

    DRAFT = "draft"  # only its tokens, for a later decode of the same audio: no rescoring, no grammar
    WORDS = "words"  # part of the answer (a window of a long utterance): rescored, no grammar (no command)
    COMMAND = "command"  # the answer to a short utterance: rescored, and matched against the command grammar


class MoonshineModel:
    def __init__(self, folder: Path) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        providers = ["CPUExecutionProvider"]
        def session(name: str) -> ort.InferenceSession:
            return ort.InferenceSession(str(folder / name), options, providers=providers)

        try:
            self._encoder = session("encoder.onnx")
            self._cross = session("decoder_cross.onnx")
            self._step = session("decoder_step.onnx")
        except Exception as exc:  # onnxruntime raises its own exception types
            raise AsrError(f"the converted Moonshine model in {folder} does not load: {exc}") from exc
        self.tokenizer = MoonshineTokenizer.load(folder / "tokenizer.bin")
        self._present = [o.name for o in self._step.get_outputs()][1:]
        self._past_inputs = [i.name for i in self._step.get_inputs() if i.name.startswith("past_key_values")]
        self._cross_outputs = [o.name for o in self._cross.get_outputs()]

    def transcribe(
        self, audio: np.ndarray, bias: PhraseBias | None = None, draft: list[int] | None = None,
        use: Use | Callable[[], Use] = Use.COMMAND,
    ) -> Transcript:
        """Text of `audio` (float32, 16 kHz, mono, -1..1); "" for silence. With `bias`, near-miss words are
        replaced by phrase-set words the model finds about as likely (`wren.speech.asr.bias`).
        `draft`: the tokens of an earlier decode of the start of the same utterance; they are checked in
        one decoder pass and the greedy search goes on from the first token that differs (the result is
        exactly the greedy result, found with fewer decoder steps).
        `use`: what the result is for (`Use`), or a callable asked once, when the greedy search is done:
        the caller's guess may have become the answer, or stopped being one, while it was decoded."""
        seconds = len(audio) / SAMPLE_RATE
        if not len(audio) or _dbfs(audio) < SILENT_DBFS:
            return Transcript("", [])
        if seconds < MIN_AUDIO_S:
            audio = np.concatenate([audio, np.zeros(int(MIN_AUDIO_S * SAMPLE_RATE) - len(audio), np.float32)])
        hidden = self._encoder.run(None, {"input_values": audio[None, :].astype(np.float32, copy=False)})[0]
        cross = dict(zip(self._cross_outputs, self._cross.run(None, {"encoder_hidden_states": hidden}),
                         strict=True))
        first_tokens = bias.by_first_token(self.tokenizer) if bias else None
        search = _Greedy(self.tokenizer, math.ceil(seconds * MAX_TOKENS_PER_S) + EXTRA_TOKENS, first_tokens)
        self._search(cross, search, draft or [])
        text = self.tokenizer.decode(search.tokens)
        purpose = use() if callable(use) else use
        if bias and purpose is not Use.DRAFT:
            text, score = self._rescored(cross, text, search, bias)
            grammar = bias.grammar(self.tokenizer) if purpose is Use.COMMAND else None
            if grammar is not None and not accepts(grammar, self.tokenizer.encode(text)):
                text = self._commanded(cross, text, score, grammar, search.max_tokens)
        return Transcript(strip_wrapping_quotes(trim_repeats(text)), search.tokens)

    def _cache(self, cross: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        cache = {name.replace("present", "past_key_values"): value for name, value in cross.items()}
        cache.update({name: EMPTY_SELF_CACHE for name in self._past_inputs if ".decoder." in name})
        return cache

    def _search(self, cross: dict[str, np.ndarray], search: _Greedy, draft: list[int]) -> None:
        cache = self._cache(cross)
        pending = [START_ID, *draft[: search.max_tokens]]
        while True:
            outputs = self._step.run(None, self._feed(pending, cache))
            for name, value in zip(self._present, outputs[1:], strict=True):
                if ".decoder." in name:  # the encoder half of the cache never changes
                    cache[name.replace("present", "past_key_values")] = value
            logits = outputs[0][0]
            for i in range(len(pending)):
                token = search.choose(logits[i])
                if i + 1 < len(pending) and token == pending[i + 1]:
                    search.emit(token)  # the draft's next token is the greedy one: accepted
                    continue
                if i + 1 < len(pending):  # the draft differs here: forget its cache from this point on
                    keep = cache[self._past_inputs[0]].shape[2] - (len(pending) - i - 1)
                    for name in self._past_inputs:
                        if ".decoder." in name:
                            cache[name] = np.ascontiguousarray(cache[name][:, :, :keep, :])
                break
            if token == END_ID or len(search.tokens) >= search.max_tokens:
                if token != END_ID:
                    log.debug("moonshine: token cap (%d) reached", search.max_tokens)
                return
            search.emit(token)
            pending = [token]

    def score(self, cross: dict[str, np.ndarray], text: str) -> float:
        """log p(text | audio), by teacher forcing: one decoder pass over all of its tokens."""
        ids = [START_ID, *self.tokenizer.encode(text), END_ID]
        logits = self._step.run(None, self._feed(ids[:-1], self._cache(cross)))[0][0]
        peak = logits.max(axis=1, keepdims=True)
        log_norm = peak[:, 0] + np.log(np.exp(logits - peak).sum(axis=1))
        return float(sum(logits[i, ids[i + 1]] - log_norm[i] for i in range(len(ids) - 1)))

    def _rescored(
        self, cross: dict[str, np.ndarray], text: str, search: _Greedy, bias: PhraseBias
    ) -> tuple[str, float]:
        """Near-miss words rescored (`wren.speech.asr.bias`): the text and its log-probability. A candidate
        the greedy search's own logits already rule out is not scored (`_Greedy.at_most`): "What is the
        date today?" for "What is the capital of France" loses at "date", and each pass saved is ≈ 10 ms."""
        greedy_score = search.score
        best, best_gain, best_score = text, 0.0, greedy_score
        for candidate in [*bias.candidates(text, search.heard_as), *bias.sentence_candidates(text)]:
            allowance = candidate.allowance(bias.margin)
            most = search.at_most([*self.tokenizer.encode(candidate.text), END_ID])
            if most - greedy_score + allowance + PRUNE_SLACK <= best_gain:
                continue
            score = self.score(cross, candidate.text)
            gain = score - greedy_score + allowance
            if gain > best_gain:
                best, best_gain, best_score = candidate.text, gain, score
        if best != text:
            log.debug("moonshine: biased %r -> %r", text, best)
        return best, best_score

    def _commanded(
        self, cross: dict[str, np.ndarray], text: str, score: float, grammar: TokenAutomaton, max_tokens: int
    ) -> str:
        """The most likely command in the audio instead of `text` if `prefers_command` says so."""
        command = self.constrained(cross, grammar, max_tokens, floor=score - GRAMMAR_MARGIN)
        if command is None:
            return text
        command_text = self.tokenizer.decode(command.tokens)
        if not prefers_command(text, score, command_text, command.score):
            return text
        log.debug("moonshine: command %r (%.2f) for %r (%.2f)", command_text, command.score, text, score)
        return command_text

    def constrained(self, cross: dict[str, np.ndarray], automaton: TokenAutomaton, max_tokens: int,
                    beam: int = BEAM, floor: float = -math.inf) -> Constrained | None:
        """The most likely sentence of a command grammar (`constrained.py`), decoded on the same audio."""
        audio_cache = {name.replace("present", "past_key_values"): value for name, value in cross.items()}
        tiled: dict[int, dict[str, np.ndarray]] = {}

        Cache = dict[str, np.ndarray]

        def step(ids: np.ndarray, self_cache: Cache) -> tuple[np.ndarray, Cache]:
            rows = len(ids)
            if rows not in tiled:
                tiled[rows] = {n: np.repeat(v, rows, axis=0) for n, v in audio_cache.items()}
            outputs = self._step.run(None, {**self_cache, **tiled[rows], "input_ids": ids})
            logits = outputs[0][:, -1, :]
            peak = logits.max(axis=1, keepdims=True)
            log_probs = logits - (peak + np.log(np.exp(logits - peak).sum(axis=1, keepdims=True)))
            presents = zip(self._present, outputs[1:], strict=True)
            following = {name.replace("present", "past_key_values"): value
                         for name, value in presents if ".decoder." in name}
            return log_probs, following

        empty = {name: EMPTY_SELF_CACHE for name in self._past_inputs if ".decoder." in name}
        return constrained_search(automaton, step, empty, max_tokens, beam, floor)

    def _feed(self, ids: list[int], cache: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        feed = {name: cache[name] for name in self._past_inputs}
        feed["input_ids"] = np.array([ids], np.int64)
        return feed


@dataclass
class Transcript:
    text: str
    tokens: list[int]  # the greedy tokens (a draft for a later decode of the same utterance)


class _Greedy:
    """The state of one greedy search: tokens so far, their log-probability, and for the phrase bias which
    phrase-set words the model ranked among its top `ALTERNATIVES` where each word starts."""

    def __init__(self, tokenizer: MoonshineTokenizer, max_tokens: int,
                 first_tokens: dict[int, list[str]] | None) -> None:
        self._tokenizer = tokenizer
        self.max_tokens = max_tokens
        self._first_tokens = first_tokens
        self.tokens: list[int] = []
        self.score = 0.0
        self.heard_as: dict[int, set[str]] = {}
        self._words = -1
        self._logits: np.ndarray | None = None
        # For `at_most`: each position's logits and their log-normaliser (position i predicts token i), and
        # the log-probability of the first i tokens. A few dozen rows the decoder made anyway.
        self._positions: list[tuple[np.ndarray, float]] = []
        self._prefix = [0.0]

    def choose(self, logits: np.ndarray) -> int:
        token = int(logits.argmax())
        log_norm = _logsumexp(logits)
        self.score += float(logits[token]) - log_norm
        self._logits = logits
        self._positions.append((logits, log_norm))
        return token

    def at_most(self, ids: list[int]) -> float:
        """An upper bound on log p(ids | audio), from this search alone: up to the first token where `ids`
        part from the greedy tokens the contexts are the same, so that much is known exactly, and every
        later token only lowers it (a log-probability is ≤ 0)."""
        k = 0
        while k < min(len(ids), len(self.tokens)) and ids[k] == self.tokens[k]:
            k += 1
        if k >= len(ids) or k >= len(self._positions):
            return 0.0  # nothing known past the greedy tokens: no bound
        logits, log_norm = self._positions[k]
        return self._prefix[k] + float(logits[ids[k]]) - log_norm

    def emit(self, token: int) -> None:
        if self._tokenizer.starts_word(token):
            self._words += 1
            if self._first_tokens and self._logits is not None:
                top = np.argpartition(self._logits, -ALTERNATIVES)[-ALTERNATIVES:]
                found = {w for t in top if int(t) != token for w in self._first_tokens.get(int(t), ())}
                if found:
                    self.heard_as[self._words] = found
        logits, log_norm = self._positions[len(self.tokens)]
        self._prefix.append(self._prefix[-1] + float(logits[token]) - log_norm)
        self.tokens.append(token)


def _logsumexp(values: np.ndarray) -> float:
    peak = float(values.max())
    return peak + float(np.log(np.exp(values - peak).sum()))


def _dbfs(audio: np.ndarray) -> float:
    rms = float(np.sqrt(np.mean(np.square(audio, dtype=np.float64))))
    return 20 * math.log10(rms) if rms > 0 else -200.0
