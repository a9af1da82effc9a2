"""Wiring: config → SpeechStack (models loaded once) + AgentLoop + executors → the aiohttp app on one port.

`WrenServer` is what `wren serve` runs and what the tests start on 127.0.0.1 with an ephemeral port.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from shared_protocol import PROTOCOL_VERSIONS, ProtocolError, messages
from wren.agent.engines.base import empty_prompts
from wren.agent.http import API_KEY_FILE, load_or_create_api_key, new_api_key
from wren.agent.http import add_routes as add_chat_routes
from wren.agent.timeparse import check_timezone_setting
from wren.config import Config, ConfigError, package_version
from wren.pipeline.batched_executor import BatchedExecutor
from wren.pipeline.hold import HOLD_PHRASE
from wren.pipeline.tts_scheduler import TtsScheduler
from wren.privacy import log_transcripts
from wren.session import SessionServices
from wren.session.services import normalise_phrase
from wren.session.uplink_rounds import UplinkRounds
from wren.speech.codec import CodecError, make_encoder
from wren.speech.priority import lower_this_thread
from wren.store import data_dir, describe, shared_value
from wren.transport.addresses import ServerUrls, server_urls
from wren.transport.auth import check_auth_config
from wren.transport.connection_limits import WrenRunner
from wren.transport.server import SESSIONS_KEY, build_web_app
from wren.transport.tls import server_tls_context

log = logging.getLogger(__name__)


def check_audio_config(config: Config) -> None:
    """Refuse to start with a downlink the server could not announce or encode (fail now, not per hello)."""
    audio = config.audio
    try:
        messages.check_audio_params(
            {"format": audio.downlink_format, "sample_rate": audio.downlink_sample_rate, "channels": 1,
             "frame_duration": audio.downlink_frame_ms}
        )
        make_encoder(audio.downlink_format, audio.downlink_sample_rate, audio.downlink_frame_ms,
                     audio.opus_bitrate)
    except (ProtocolError, CodecError) as exc:
        raise ConfigError(f"[audio] downlink: {exc}") from None
    if config.server.protocol_version not in PROTOCOL_VERSIONS:
        raise ConfigError(f"server.protocol_version must be 1, 2 or 3 (got {config.server.protocol_version})")


def uplink_on_loop(config: Config, speech: Any) -> bool:
    """Whether the uplink's frame work runs on the event loop: `[server] uplink_on_loop`, and a recogniser
    whose feed never blocks (`feeds_without_blocking`, Moonshine); pocketsphinx, vosk (a worker process's
    finish() waits for its reply) and Wyoming (a socket) stay on the listen threads."""
    asr = getattr(speech, "asr", None)
    return config.server.uplink_on_loop and bool(getattr(asr, "feeds_without_blocking", False))


def _log_warm_failure(done: asyncio.Future[Any]) -> None:
    if not done.cancelled() and done.exception() is not None:  # a fixed phrase TTS cannot say: no cache
        log.warning("tts: caching the fixed phrases failed: %s", done.exception())


class WrenServer:
    def __init__(self, config: Config, speech: Any = None, agent: Any = None) -> None:
        check_auth_config(config.auth)
        # Loaded once, here: a half or broken TLS setting is refused before any model loads.
        self._tls = server_tls_context(config.server)
        check_audio_config(config)
        check_timezone_setting(config.server.timezone)
        log_transcripts(config.server.log_transcripts)
        self.config = config
        self.speech = speech
        self.agent = agent
        self._own_speech = speech is None  # what we load we close (ASR worker processes)
        self._own_agent = agent is None
        # The uplink's many short jobs (one per frame): batched hand-off, see wren.pipeline.batched_executor.
        self.listen_executor = BatchedExecutor(config.server.listen_workers, "wren-listen")
        # The speak threads yield the cores to the event loop when both want one (wren.speech.priority).
        self.speak_executor = ThreadPoolExecutor(
            max(1, config.server.speak_workers), "wren-speak",
            initializer=lower_this_thread, initargs=(config.tts.nice, config.tts.idle_priority),
        )
        # Every session's synthesis goes through this one scheduler: earliest deadline first on the speak
        # workers, so one device's long reply never queues ahead of another's first words.
        self.tts_scheduler = TtsScheduler(self.speak_executor, config.server.speak_workers)
        self.uplink_rounds = UplinkRounds()  # audio fed straight from the socket readers (uplink on the loop)
        self.app: web.Application | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.urls: list[ServerUrls] = []  # console, OTA and WebSocket URL per reachable address, once bound
        # Where POST /api/chat's key is kept, as `wren serve` names it: a file, or the shared store's key.
        self.api_key_place = str(data_dir(config) / API_KEY_FILE)
        self.api_key = ""  # POST /api/chat's key, read (or made) at start
        self.api_key_created = False  # made by this start: `wren serve` prints it, once

    async def start(self, host: str | None = None, port: int | None = None) -> int:
        """Load what is missing, bind, and return the port actually bound (port 0 = ephemeral)."""
        loop = asyncio.get_running_loop()
        if self.speech is None:
            from wren.speech import SpeechStack

            self.speech = await loop.run_in_executor(None, SpeechStack.load, self.config)
        self.listen_executor.on_loop = uplink_on_loop(self.config, self.speech)
        if self.agent is None:
            from wren.agent.loop import AgentLoop

            self.agent = AgentLoop.from_config(self.config)
            await self.agent.start()
            shared = " (shared with the other instances using it)" if self.config.store.url else ""
            log.info("store: %s%s", describe(self.config), shared)
        services = SessionServices(
            config=self.config,
            speech=self.speech,
            agent=self.agent,
            listen_executor=self.listen_executor,
            speak_executor=self.speak_executor,
            tts_scheduler=self.tts_scheduler,
            uplink_rounds=self.uplink_rounds,
            wake_words=frozenset(normalise_phrase(w) for w in self.config.server.wake_words),
        )
        self.app = build_web_app(services)
        timers = getattr(self.agent, "timers", None)
        if timers is not None:
            # Timers going off are spoken on the device's live session (with a shared store: only by the
            # instance the device is connected to).
            timers.set_delivery(self.announce, reachable=self.has_device)
        # POST /api/chat: text turns on the same port, for holders of the key (made at the first start).
        self.api_key, self.api_key_created = self._load_api_key()
        add_chat_routes(self.app, self.agent, self.api_key, device_sessions=self.config.api.device_sessions)
        self._warm_fixed_phrases(loop)
        # WrenRunner: an AppRunner that also closes sockets sending no request ([limits] handshake_timeout_s).
        self._runner = WrenRunner(self.app, handle_signals=False, shutdown_timeout=5.0)
        await self._runner.setup()
        tls = self._tls
        site = web.TCPSite(
            self._runner,
            host or self.config.server.host,
            self.config.server.port if port is None else port,
            ssl_context=tls,
        )
        await site.start()
        sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
        self.port = sockets[0].getsockname()[1] if sockets else port
        self.urls = server_urls(host or self.config.server.host, int(self.port or 0),
                                self.config.server.websocket_path, self.config.server.ota_path,
                                secure=tls is not None)
        for url in self.urls:
            log.info("Wren %s listening: console %s, OTA %s, WebSocket %s", package_version(), url.console,
                     url.ota, url.websocket)
        return int(self.port or 0)

    def _load_api_key(self) -> tuple[str, bool]:
        """The key in the data dir, or, with a shared store, the one every instance shares (made by the
        first to start)."""
        if not self.config.store.url:
            return load_or_create_api_key(data_dir(self.config))
        self.api_key_place = f"{self.config.store.key_prefix}secret:api_key in {describe(self.config)}"
        return shared_value(self.config, "api_key", new_api_key)

    def _warm_fixed_phrases(self, loop: asyncio.AbstractEventLoop) -> None:
        """Synthesise the agent's fixed phrases into the TTS phrase cache in the background, so that the
        first "You're welcome." of the day already starts at once (wren.speech.tts.phrase_cache): read
        back from disk after the first start, and never synthesised while a device is in a turn."""
        warm = getattr(self.speech.tts, "warm", None)
        if warm is None:
            return
        fixed = getattr(self.agent.engine, "fixed_phrases", None)
        phrases = [*empty_prompts(), *(fixed() if callable(fixed) else [])]
        if self.config.agent.hold_phrase_after_ms > 0:
            phrases.append(HOLD_PHRASE)  # said when a reply is late: it must start at once, with no synthesis
        warming = loop.run_in_executor(None, warm, phrases, self._any_turn)
        warming.add_done_callback(_log_warm_failure)

    def _any_turn(self) -> bool:
        """Whether any device is in a turn now (called from the warm-up's thread: `list()` copies the set in
        one step, and a stale answer only shifts the warm-up by one poll)."""
        return any(getattr(session, "in_turn", False) for session in list(self.sessions))

    @property
    def sessions(self) -> set[Any]:
        return self.app[SESSIONS_KEY] if self.app is not None else set()

    def _announceable(self, session_key: str) -> list[Any]:
        return [s for s in self.sessions if s.session_key == session_key and s.can_announce]

    def has_device(self, session_key: str) -> bool:
        """Whether a device of `session_key` is connected to this instance and can be spoken to."""
        return bool(self._announceable(session_key))

    async def announce(self, session_key: str, text: str) -> bool:
        """The timers' delivery callback: speak `text` on the device of `session_key` (its newest live
        connection); False when none is connected (the timer keeps it for the device's next hello)."""
        live = self._announceable(session_key)
        if not live:
            return False
        return bool(await max(live, key=lambda s: s.connected_at).announce(text))

    async def stop(self) -> None:
        timers = getattr(self.agent, "timers", None)
        if timers is not None and self.app is not None:
            timers.set_delivery(None)  # sessions are about to close: what falls due now waits for a restart
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._own_agent and self.agent is not None:
            await self.agent.close()
            self.agent = None
        self.listen_executor.shutdown()
        self.speak_executor.shutdown(wait=False, cancel_futures=True)
        if self._own_speech and self.speech is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.speech.close)
            self.speech = None
