"""A real `DeviceSession` driven in-process: a recording connection, the real config and executors, and
small model doubles (VAD, ASR, TTS, agent), so a test can put the session in any listen state and watch it.

The session is fed exactly as the transport feeds it (`receive_text` / `receive_binary`); `sync()` sends a
`ping` and waits for its `pong`: the inbox handles frames strictly in order, so once the pong is out, every
frame sent before it has been acted on (utterances ended, replies queued, listening begun or dropped).

Every message the session writes is recorded together with whether it was listening at that moment
(`Sent.listening`), so "the answer came while still listening" is a fact about the send, not a race.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from array import array
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from wren.agent.events import TextChunk
from wren.config import Config
from wren.pipeline.batched_executor import BatchedExecutor
from wren.pipeline.turn_detection import ListenMode
from wren.session.device_session import DeviceSession
from wren.session.listen_rules import ListenState
from wren.session.services import SessionServices, normalise_phrase

RATE = 16000
FRAME_MS = 60
FRAME_SAMPLES = RATE * FRAME_MS // 1000
WINDOW_MS = 32  # the VAD double scores 32 ms windows, as Silero does
WINDOW_BYTES = RATE * WINDOW_MS // 1000 * 2
LOUD = 8000

WORDS = "what time is it"  # what the ASR double hears in any speech
ANSWER = "It is noon."  # the agent double's reply
SLOW_QUERY = "tell me a story"  # typed; answered by a held reply
SLOW_FIRST = "Let me think about that."  # the held reply's first sentence, spoken at once
SLOW_REST = "Here is the rest."  # ... and its second, only once released
ANNOUNCEMENT = "Your timer is done."  # an unprompted reply whose synthesis waits until released
TYPED = "what is the weather"
WAKE = "hi wren"


# ---- frames -----------------------------------------------------------------------------------------


def hello(**audio: Any) -> dict:
    params = {"format": "pcm", "sample_rate": RATE, "channels": 1, "frame_duration": FRAME_MS, **audio}
    return {"type": "hello", "version": 1, "transport": "websocket", "audio_params": params}


def listen(state: str, mode: ListenMode | str | None = None, text: str | None = None) -> dict:
    msg: dict = {"type": "listen", "state": state}
    if mode is not None:
        msg["mode"] = str(mode)
    if text is not None:
        msg["text"] = text
    return msg


def _frames(ms: int, sample: int, frame_ms: int = FRAME_MS) -> list[bytes]:
    samples = RATE * frame_ms // 1000
    frame = array("h", [sample, -sample] * (samples // 2)).tobytes()
    return [frame] * -(-ms // frame_ms)


def speech_frames(ms: int, frame_ms: int = FRAME_MS) -> list[bytes]:
    """Loud 16 kHz PCM (the VAD double scores it 1.0) in device frames, covering at least `ms`."""
    return _frames(ms, LOUD, frame_ms)


def silence_frames(ms: int, frame_ms: int = FRAME_MS) -> list[bytes]:
    return _frames(ms, 0, frame_ms)


# ---- model doubles ------------------------------------------------------------------------------------


class VadStream:
    """1.0 for each whole 32 ms window of loud PCM, 0.0 for a quiet one."""

    window_ms = WINDOW_MS

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.closed = False

    def process(self, pcm: bytes) -> list[float]:
        self._buffer += pcm
        out = []
        while len(self._buffer) >= WINDOW_BYTES:
            window = array("h", bytes(self._buffer[:WINDOW_BYTES]))
            del self._buffer[:WINDOW_BYTES]
            out.append(1.0 if max(max(window), -min(window)) >= LOUD // 2 else 0.0)
        return out

    def close(self) -> None:
        self.closed = True


class Vad:
    def __init__(self) -> None:
        self.streams: list[VadStream] = []  # one per utterance begun

    def new_stream(self, room=None) -> VadStream:
        self.streams.append(VadStream())
        return self.streams[-1]


class AsrStream:
    def __init__(self) -> None:
        self.accepted = 0

    def accept(self, pcm: bytes) -> None:
        self.accepted += len(pcm)

    def finish(self) -> str:
        return WORDS if self.accepted else ""

    def close(self) -> None:
        pass


class Asr:
    def __init__(self) -> None:
        self.streams: list[AsrStream] = []  # one per speech onset

    def open_stream(self, speaker: str | None = None) -> AsrStream:
        self.streams.append(AsrStream())
        return self.streams[-1]


class Tts:
    """60 ms of loud PCM per sentence; `hold(text)` makes that sentence's synthesis wait for `release()`."""

    sample_rate = RATE

    def __init__(self) -> None:
        self.held: set[str] = set()
        self.gate = threading.Event()
        self.spoken: list[str] = []

    def hold(self, text: str) -> None:
        self.held.add(text)

    def release(self) -> None:
        self.gate.set()

    def synthesize(self, text: str):
        if text in self.held:
            self.gate.wait(10)  # runs in the speak executor: only that thread waits
        self.spoken.append(text)
        yield array("h", [LOUD, -LOUD] * (FRAME_SAMPLES // 2)).tobytes()


class AgentTurn:
    def __init__(self, text: str, held: bool) -> None:
        self.text = text
        self.held = held
        self.gate = asyncio.Event()
        self.interrupted: list[str] = []
        self.finished = False

    def __aiter__(self):
        return self._events()

    async def ready(self, timeout: float) -> bool:
        return True  # the first words come at once (a held reply waits only after them)

    async def _events(self):
        if not self.held:
            yield TextChunk(ANSWER)
        else:
            yield TextChunk(SLOW_FIRST + " ")
            await self.gate.wait()
            yield TextChunk(SLOW_REST)
        self.finished = True

    async def interrupt(self, spoken: str) -> None:
        self.interrupted.append(spoken)


class Agent:
    """What the session asks of `wren.agent.loop.AgentLoop`: turns, prompt wording, the store (bias)."""

    def __init__(self) -> None:
        self.engine = SimpleNamespace(name="builtin")
        self.store = SimpleNamespace(load=self._load)
        self.turns: list[AgentTurn] = []
        self._hold_next = False

    async def _load(self, session_key: str, engine: str) -> tuple[list, dict]:
        return [], {}

    def hold_next(self) -> None:
        self._hold_next = True

    def release(self) -> None:
        for turn in self.turns:
            turn.gate.set()

    def begin_turn(self, msg: Any, device_tools: Any = None) -> AgentTurn:
        turn = AgentTurn(msg.content, self._hold_next)
        self._hold_next = False
        self.turns.append(turn)
        return turn

    @staticmethod
    def render_prompt(session_key: str, kind: str, count: int) -> str:
        return prompt_words(kind, count)


def prompt_words(kind: str, count: int) -> str:
    return f"Empty input {kind} {count}."


# ---- the connection -----------------------------------------------------------------------------------


@dataclass
class Sent:
    msg: dict | None  # a text frame, decoded
    data: bytes | None  # a binary frame
    listening: bool  # was the session capturing an utterance when this went out?

    def is_(self, type_: str, state: str | None = None) -> bool:
        return self.msg is not None and self.msg.get("type") == type_ and (
            state is None or self.msg.get("state") == state)


class Connection:
    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.closed_with: tuple[int, str] | None = None
        self.listening: Callable[[], bool] = lambda: False

    async def send_text(self, text: str) -> None:
        self.sent.append(Sent(json.loads(text), None, self.listening()))

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(Sent(None, bytes(data), self.listening()))

    async def close(self, code: int, reason: str) -> None:
        self.closed_with = (code, reason)

    @property
    def closed(self) -> bool:
        return self.closed_with is not None


# ---- the harness -------------------------------------------------------------------------------------


def fast_config() -> Config:
    """The real defaults, with the VAD's durations cut so a turn is a handful of 60 ms frames."""
    config = Config()
    config.vad.silence_ms = 128  # 4 windows of silence end an utterance
    config.vad.no_speech_timeout_s = 0.6  # 10 frames of silence are "no speech"
    config.vad.max_utterance_s = 0.9  # 15 frames of speech from onset (min_speech_ms = 150: frame 3)
    config.audio.drain_margin_ms = 0  # `tts stop` right after the last frame's play time
    config.server.idle_timeout_s = 30.0
    return config


class Harness:
    def __init__(self, config: Config | None = None) -> None:
        self.config = config or fast_config()
        self.vad, self.asr, self.tts, self.agent = Vad(), Asr(), Tts(), Agent()
        self.conn = Connection()
        self._listen_pool = BatchedExecutor(2, "test-listen")
        self._speak_pool = ThreadPoolExecutor(2, thread_name_prefix="test-speak")
        services = SessionServices(
            config=self.config, speech=SimpleNamespace(vad=self.vad, asr=self.asr, tts=self.tts),
            agent=self.agent, listen_executor=self._listen_pool, speak_executor=self._speak_pool,
            wake_words=frozenset(normalise_phrase(w) for w in self.config.server.wake_words),
        )
        identity = SimpleNamespace(device_id="cells", client_id="cells-client", authorization="",
                                   protocol_version=None, remote="test")
        self.session = DeviceSession(identity, self.conn, services)
        self.conn.listening = lambda: self.session.listener.active
        self._announcements: list[asyncio.Task[bool]] = []
        self._mark = 0
        self._started = False

    # ---- driving --------------------------------------------------------------------------------

    async def start(self, first: dict | None = None) -> None:
        self.session.start()
        self._started = True
        await self.send(first or hello())
        await self.wait(lambda: any(s.is_("hello") for s in self.conn.sent), "the server hello")

    async def send(self, msg: dict) -> None:
        await self.session.receive_text(json.dumps(msg))

    async def audio(self, frames: list[bytes]) -> None:
        for frame in frames:
            await self.session.receive_binary(frame)

    async def sync(self) -> None:
        """Every frame sent so far has been acted on (the inbox is strictly ordered)."""
        pongs = self.count(lambda s: s.is_("pong"), since=0)
        await self.send({"type": "ping"})
        await self.wait(lambda: self.count(lambda s: s.is_("pong"), since=0) > pongs, "the pong")

    async def settle(self) -> None:
        """Every reply done, and the session has acted on their ends."""
        await self.wait(lambda: not self.session.replies.busy, "the replies to end")
        await self.sync()

    def release(self) -> None:
        """Let every held reply go on."""
        self.agent.release()
        self.tts.release()

    async def announce(self) -> None:
        """An unprompted reply (a timer going off) whose synthesis waits for `release()`: a reply in progress
        that the device did not ask for, so it can start after speech onset."""
        self.tts.hold(ANNOUNCEMENT)
        starts = self.count(lambda s: s.is_("tts", "start"))
        self._announcements.append(asyncio.create_task(self.session.announce(ANNOUNCEMENT)))
        await self.wait(lambda: self.count(lambda s: s.is_("tts", "start")) > starts, "the announcement")

    async def wait(self, done: Callable[[], bool], what: str, timeout: float = 3.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; sent: {self.summary()}")
            await asyncio.sleep(0.003)

    async def aclose(self) -> None:
        self.release()
        if self._started:
            await self.session.close()
        for task in self._announcements:
            task.cancel()
        await asyncio.gather(*self._announcements, return_exceptions=True)
        self._listen_pool.shutdown(wait=True)
        self._speak_pool.shutdown(wait=True)

    # ---- observing -------------------------------------------------------------------------------

    @property
    def state(self) -> ListenState:
        return self.session.turns.state

    @property
    def listening_mode(self) -> ListenMode | None:
        listener = self.session.listener
        return listener.mode if listener.active else None

    def mark(self) -> None:
        """Observations from here on (`since`, `count`, `texts`)."""
        self._mark = len(self.conn.sent)

    def since(self, since: int | None = None) -> list[Sent]:
        return self.conn.sent[self._mark if since is None else since:]

    def count(self, match: Callable[[Sent], bool], since: int | None = None) -> int:
        return sum(1 for s in self.since(since) if match(s))

    def texts(self) -> list[dict]:
        """The text frames since the mark, without the pongs of `sync()`."""
        return [s.msg for s in self.since() if s.msg is not None and s.msg["type"] != "pong"]

    def stts(self, text: str) -> list[Sent]:
        return [s for s in self.since() if s.is_("stt") and s.msg["text"] == text]

    def sentences(self, text: str) -> list[Sent]:
        return [s for s in self.since() if s.is_("tts", "sentence_start") and s.msg["text"] == text]

    def index(self, match: Callable[[Sent], bool]) -> int:
        return next(i for i, s in enumerate(self.since()) if match(s))

    async def stt(self, text: str) -> Sent:
        """The (first, since the mark) `stt` with `text`, once it is out."""
        await self.wait(lambda: self.stts(text), f"stt {text!r}")
        return self.stts(text)[0]

    def summary(self) -> str:
        return ", ".join(
            "bin" if s.data is not None else
            "/".join(str(s.msg.get(k)) for k in ("type", "state", "text") if s.msg.get(k) is not None)
            for s in self.conn.sent[-40:]
        )
