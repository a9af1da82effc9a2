"""Serve Wren's recogniser and voice over the Wyoming protocol (Home Assistant's Wyoming integration).

`wren wyoming --uri tcp://0.0.0.0:10300` loads the configured `[asr]` engine (Moonshine by default) and
`[tts]` voice (piper, en_US joe) once and answers any number of Wyoming connections: `Describe` → `Info`
(one ASR and one TTS program, their languages and the voice's name), `Transcribe`/`AudioStart`/
`AudioChunk`.../`AudioStop` → `Transcript`, and `Synthesize` (or the streaming `SynthesizeStart`/`Chunk`/
`Stop`) → `AudioStart`/`AudioChunk`.../`AudioStop`. No device protocol, agent or auth: Home Assistant runs
the conversation, this process only listens and speaks, so give it a port only your LAN can reach.

Blocking engine work runs in two thread pools as in `wren serve` (`[server] listen_workers` for ASR,
`speak_workers` for TTS); a connection's events are handled in order, so one recogniser stream is never used
by two threads at once. Audio in any rate, width or channel count is converted to the recogniser's 16 kHz
mono; the voice's own rate goes out. A failure is answered with a Wyoming `error` event, never a hang-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info, TtsProgram, TtsVoice
from wyoming.server import AsyncEventHandler
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from wren.commands.logs import configure_logging
from wren.config import Config, ConfigError, load_config, package_version
from wren.speech.asr.bias import margin_for
from wren.speech.asr.errors import AsrError
from wren.speech.sentences import SentenceSplitter
from wren.speech.tts.base import TtsError
from wren.speech.wyoming import PcmConverter, parse_uri

log = logging.getLogger("wren.wyoming")

DEFAULT_URI = "tcp://0.0.0.0:10300"
SAMPLES_PER_CHUNK = 1024  # audio goes out in chunks this size, like wyoming-piper's
WREN = Attribution(name="Wren", url="")  # no public home page to point at
ATTRIBUTION = {
    "moonshine": Attribution(name="Useful Sensors", url="https://github.com/usefulsensors/moonshine"),
    "pocketsphinx": Attribution(name="CMU", url="https://github.com/cmusphinx/pocketsphinx"),
    "vosk": Attribution(name="Alpha Cephei", url="https://alphacephei.com/vosk/"),
    "piper": Attribution(name="rhasspy", url="https://github.com/rhasspy/piper"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--uri", default=DEFAULT_URI,
                        help=f"tcp://host:port to listen on (default {DEFAULT_URI}; port 0 = any free)")
    parser.add_argument("--config", help="TOML config file (default: $WREN_CONFIG, else built-in defaults)")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")


def voice_name_and_language(tts: Any, fallback_language: str) -> tuple[str, str]:
    """The voice's name as Wyoming clients list it (piper: the file name, `en_US-joe-medium`) and language
    (from the voice's config, `en_US`)."""
    path = str(getattr(tts, "voice_path", "") or "")
    if not path:
        return str(getattr(tts, "voice", "") or tts.name), fallback_language
    language = fallback_language
    try:
        config = json.loads(Path(f"{path}.json").read_text("utf-8"))
        language = str(config.get("language", {}).get("code") or language)
    except (OSError, ValueError, AttributeError):
        pass  # a voice without a readable config still speaks; only its advertised language is a guess
    return Path(path).name.removesuffix(".onnx"), language


def listen_address(uri: str) -> tuple[str, int]:
    address = parse_uri(uri, ConfigError, "--uri")
    return address.host, address.port


def build_info(asr: Any, tts: Any, language: str) -> Info:
    version = package_version()
    primary = language.replace("_", "-").split("-")[0].lower()
    languages = list(dict.fromkeys([primary, language]))  # "en" first: Home Assistant asks for that
    voice, voice_language = voice_name_and_language(tts, language)
    model = AsrModel(name=asr.name, attribution=ATTRIBUTION.get(asr.name, WREN), installed=True,
                     description=f"{asr.name} (through Wren)", version=None, languages=languages)
    recogniser = AsrProgram(name="wren-asr", attribution=WREN, installed=True, version=version,
                            description=f"Wren speech recognition ({asr.name})", models=[model])
    speaker = TtsVoice(name=voice, attribution=ATTRIBUTION.get(tts.name, WREN), installed=True,
                       description=f"{voice} ({tts.name})", version=None, languages=[voice_language])
    synthesiser = TtsProgram(name="wren-tts", attribution=WREN, installed=True, version=version,
                             description=f"Wren text to speech ({tts.name})", voices=[speaker],
                             supports_synthesize_streaming=True)
    return Info(asr=[recogniser], tts=[synthesiser])


class Services:
    """What every connection of one server shares: the engines, their thread pools, the Info."""

    def __init__(self, asr: Any, tts: Any, language: str = "en-US", bias: str = "auto",
                 listen: Executor | None = None, speak: Executor | None = None,
                 max_utterance_s: float = 30.0) -> None:
        self.asr = asr
        # Bound on one utterance's audio (a client that never sends AudioStop): later chunks are dropped,
        # logged once; the transcript covers the first `max_utterance_s`.
        self.max_utterance_bytes = int(max_utterance_s * asr.sample_rate) * 2
        self.tts = tts
        self.language = language
        self.info = build_info(asr, tts, language)
        # Home Assistant's agent may be an LLM: bias toward the names a client sends only as an LLM engine
        # would in Wren (weak under "auto": open speech stays as heard).
        self.margin = margin_for(bias, "wyoming")
        self.listen = listen or ThreadPoolExecutor(2, thread_name_prefix="wyoming-listen")
        self.speak = speak or ThreadPoolExecutor(2, thread_name_prefix="wyoming-speak")


class WrenHandler(AsyncEventHandler):
    """One Wyoming connection: at most one utterance and one synthesis at a time, in event order."""

    def __init__(
        self, services: Services, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        super().__init__(reader, writer)
        self.services = services
        self._stream: Any = None
        self._converter: PcmConverter | None = None
        self._heard_bytes = 0
        self._failed = False  # this utterance's recogniser failed: its remaining audio is ignored
        self._phrases: tuple[str, ...] = ()
        self._splitter: SentenceSplitter | None = None  # set while a streamed synthesis is open

    async def handle_event(self, event: Event) -> bool:
        try:
            await self._dispatch(event)
        except (AsrError, TtsError) as exc:
            log.warning("wyoming: %s", exc)
            if isinstance(exc, AsrError):  # one error per utterance, not one per chunk after it
                self._failed = True
            self._drop_stream()
            await self.write_event(Error(text=str(exc), code=type(exc).__name__).event())
        except (KeyError, TypeError, ValueError) as exc:  # a malformed event: not a Wyoming client
            log.warning("wyoming: bad %s event (%r); closing that connection", event.type, exc)
            await self.write_event(Error(text=f"bad {event.type} event", code="bad-event").event())
            return False
        return True

    async def _dispatch(self, event: Event) -> None:
        if Describe.is_type(event.type):
            await self.write_event(self.services.info.event())
        elif Transcribe.is_type(event.type):
            request = Transcribe.from_event(event)
            self._phrases = tuple([*(request.transcript_names or ()), *(request.transcript_terms or ())])
        elif AudioStart.is_type(event.type):
            self._failed = False
            await self._open_stream()
        elif AudioChunk.is_type(event.type):
            chunk = AudioChunk.from_event(event)
            if self._failed:
                return
            if self._stream is None:  # audio without AudioStart: open one (lenient, as the servers are)
                await self._open_stream()
            assert self._converter is not None
            await self._accept(self._converter.convert(chunk))
        elif AudioStop.is_type(event.type):
            failed, self._failed = self._failed, False
            if not failed:
                await self._transcribe()
        elif Synthesize.is_type(event.type):
            if self._splitter is None:  # during a stream it only repeats the text, for older servers
                await self._speak(Synthesize.from_event(event).text, stopped=False)
        elif SynthesizeStart.is_type(event.type):
            self._splitter = SentenceSplitter()
        elif SynthesizeChunk.is_type(event.type) and self._splitter is not None:
            for sentence in self._splitter.feed(SynthesizeChunk.from_event(event).text):
                await self._speak(sentence, stopped=False)
        elif SynthesizeStop.is_type(event.type) and self._splitter is not None:
            splitter, self._splitter = self._splitter, None
            await self._speak(" ".join(splitter.flush()), stopped=True)

    # --- recognising -------------------------------------------------------------------------------------
    async def _open_stream(self) -> None:
        self._drop_stream()  # a new AudioStart abandons an unfinished utterance
        loop = asyncio.get_running_loop()
        stream = await loop.run_in_executor(self.services.listen, self.services.asr.open_stream)
        prefer = getattr(stream, "bias", None)
        if prefer is not None and self._phrases and self.services.margin > 0:
            prefer(self._phrases, self.services.margin)
        self._stream = stream
        self._converter = PcmConverter(self.services.asr.sample_rate)
        self._heard_bytes = 0

    async def _accept(self, pcm: bytes) -> None:
        if not pcm or self._stream is None:
            return
        room = self.services.max_utterance_bytes - self._heard_bytes
        if room <= 0:
            return
        if len(pcm) >= room:
            log.warning("wyoming: an utterance longer than the limit; the rest of its audio is ignored")
            pcm = pcm[: room - room % 2]
        self._heard_bytes += len(pcm)
        await asyncio.get_running_loop().run_in_executor(self.services.listen, self._stream.accept, pcm)

    async def _transcribe(self) -> None:
        if self._stream is None:
            return  # AudioStop without audio: nothing was said
        assert self._converter is not None
        await self._accept(self._converter.flush())
        stream = self._stream
        try:
            text = await asyncio.get_running_loop().run_in_executor(self.services.listen, stream.finish)
        finally:
            self._drop_stream()
        self._phrases = ()
        await self.write_event(Transcript(text=text, language=self.services.language).event())

    def _drop_stream(self) -> None:
        stream, self._stream, self._converter = self._stream, None, None
        if stream is not None:
            try:
                stream.close()
            except AsrError as exc:  # a recogniser that cannot be released is already gone
                log.warning("wyoming: releasing the recogniser failed: %s", exc)

    # --- speaking ----------------------------------------------------------------------------------------
    async def _speak(self, text: str, stopped: bool) -> None:
        """One request's audio: AudioStart, chunks as the voice makes them, AudioStop (+ SynthesizeStopped
        at the end of a streamed synthesis). Silence (nothing sayable) is still a start and a stop. The
        start waits for the first audio, so a voice that fails at once is an error event alone."""
        loop = asyncio.get_running_loop()
        tts = self.services.tts
        rate = tts.sample_rate
        started = False
        chunks: Iterator[bytes] = iter(tts.synthesize(text)) if text.strip() else iter(())
        try:
            while True:
                try:
                    pcm = await loop.run_in_executor(self.services.speak, next, chunks, None)
                except TtsError:
                    raise
                except Exception as exc:  # piper / onnxruntime errors: the client gets an error event
                    raise TtsError(f"synthesis failed: {exc}") from exc
                if not started:
                    await self.write_event(AudioStart(rate=rate, width=2, channels=1).event())
                    started = True
                if pcm is None:
                    break
                step = SAMPLES_PER_CHUNK * 2
                for i in range(0, len(pcm), step):
                    chunk = AudioChunk(rate=rate, width=2, channels=1, audio=pcm[i : i + step])
                    await self.write_event(chunk.event())
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
        await self.write_event(AudioStop().event())
        if stopped:
            await self.write_event(SynthesizeStopped().event())

    async def disconnect(self) -> None:
        self._drop_stream()


class WyomingServer:
    """The TCP server: `await start(uri)` → the port bound; `await stop()` closes every connection."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._server: asyncio.Server | None = None
        self._handlers: set[WrenHandler] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, uri: str) -> int:
        host, port = listen_address(uri)
        self._server = await asyncio.start_server(self._connected, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = WrenHandler(self.services, reader, writer)
        self._handlers.add(handler)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await handler.run()
        except (ConnectionError, asyncio.IncompleteReadError) as exc:  # a client gone mid-event
            log.debug("wyoming: connection ended: %s", exc)
        finally:
            self._handlers.discard(handler)
            if task is not None:
                self._tasks.discard(task)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for handler in list(self._handlers):
            await handler.stop()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


def load_services(config: Config) -> Services:
    from wren.speech.asr import load_asr
    from wren.speech.tts import load_tts

    asr = load_asr(config.asr, config.limits.asr_streams)
    tts = load_tts(config.tts)
    return Services(asr, tts, config.asr.language, config.asr.bias,
                    ThreadPoolExecutor(max(1, config.server.listen_workers), "wyoming-listen"),
                    ThreadPoolExecutor(max(1, config.server.speak_workers), "wyoming-speak"),
                    max_utterance_s=max(config.vad.max_utterance_s, 1.0))


async def _serve(args: argparse.Namespace) -> None:
    from wren.speech.asr import close_asr

    config = load_config(args.config)  # a mistake here is reported before any model is loaded
    host, _ = listen_address(args.uri)
    services = await asyncio.to_thread(load_services, config)
    server = WyomingServer(services)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        port = await server.start(args.uri)
        voice = services.info.tts[0].voices[0].name
        print(f"Wren {package_version()} Wyoming server on {host}:{port}: "
              f"asr {services.asr.name}, tts {services.tts.name} (voice {voice})", flush=True)
        await stop.wait()
    finally:
        await server.stop()
        close_asr(services.asr)


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level)
    try:
        asyncio.run(_serve(args))
    except (ConfigError, AsrError, TtsError, OSError) as exc:
        # A setting that cannot work: bad config or uri, a model or voice that cannot load, a port in use.
        print(f"wren wyoming: {exc}", file=sys.stderr)
        return 2
    return 0
