"""Talking to a Wyoming server (Home Assistant's speech protocol) from Wren's blocking engine calls.

Wren's engines are called from executor threads (`AsrStream.accept`, the `TtsEngine.synthesize` generator),
so the clients use the `wyoming` library's synchronous event reader and writer over a plain socket rather
than its asyncio client: no second event loop, and every wait has a socket timeout.

One connection per request (an utterance, a sentence), as Home Assistant itself does: Wyoming servers keep
per-connection state (wyoming-piper's streaming flag), a request never inherits a half-read reply from an
abandoned one, and a LAN connect costs about a millisecond. `WyomingLink` is what persists per engine: after
a failed connect it waits with exponential backoff (0.5 s doubling to 30 s) before trying again, and requests
in that window fail at once instead of each waiting on a dead host; the first connect that works again
resets it (logged once each way, not once per turn).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import BinaryIO
from urllib.parse import urlparse

from wyoming.audio import AudioChunk, AudioChunkConverter
from wyoming.event import Event, read_event, write_event
from wyoming.info import Describe, Info

from wren.speech.resample import Resampler

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
DESCRIBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"tcp://{self.host}:{self.port}"


def parse_uri(uri: str, error: type[Exception], what: str = "a Wyoming uri") -> Address:
    """`tcp://host:port` (the form Home Assistant and the Wyoming servers use); `error` for anything else."""
    parsed = urlparse((uri or "").strip())
    try:
        port = parsed.port
    except ValueError:
        port = None
    if parsed.scheme != "tcp" or not parsed.hostname or port is None:
        raise error(f"{what} must be tcp://host:port (got {uri!r})")
    return Address(parsed.hostname, port)


class WyomingConnection:
    """One request's connection: events out, events in, each wait bounded by a timeout."""

    def __init__(self, sock: socket.socket, address: Address, timeout_s: float, error: type[Exception]):
        self._sock = sock
        self._file: BinaryIO = sock.makefile("rwb")
        self.address = address
        self.timeout_s = timeout_s
        self._error = error

    def send(self, event: Event) -> None:
        self._sock.settimeout(self.timeout_s)
        try:
            write_event(event, self._file)
        except OSError as exc:  # timeouts included: a server that stopped reading
            raise self._error(f"Wyoming server {self.address}: sending {event.type} failed: {exc}") from exc

    def receive(self, timeout_s: float | None = None) -> Event:
        """The next event; `error` when none comes within the timeout or the server hung up."""
        wait = self.timeout_s if timeout_s is None else timeout_s
        if wait <= 0:
            raise self._error(f"Wyoming server {self.address}: no answer within {self.timeout_s:g} s")
        self._sock.settimeout(wait)
        try:
            event = read_event(self._file)
        except TimeoutError as exc:
            raise self._error(f"Wyoming server {self.address}: no answer within {wait:g} s") from exc
        except OSError as exc:
            raise self._error(f"Wyoming server {self.address}: connection lost: {exc}") from exc
        if event is None:  # end of stream, or a line that was not an event
            raise self._error(f"Wyoming server {self.address} closed the connection")
        if event.type == "error":  # wyoming.error.Error: the server says why it failed
            raise self._error(f"Wyoming server {self.address}: {event.data.get('text') or 'error'}")
        return event

    def close(self) -> None:
        for close in (self._file.close, self._sock.close):
            with contextlib.suppress(OSError):  # a broken connection may fail to flush; it is gone anyway
                close()


class WyomingLink:
    """The way to one Wyoming server: connects per request, backs off after failed connects; thread-safe."""

    def __init__(self, uri: str, timeout_s: float, error: type[Exception], what: str) -> None:
        if timeout_s <= 0:
            raise error(f"the Wyoming {what} timeout_s must be > 0 (got {timeout_s})")
        self.address = parse_uri(uri, error)
        self.timeout_s = timeout_s
        self.what = what  # "ASR" / "TTS", for the log lines
        self._error = error
        self._lock = threading.Lock()
        self._failures = 0
        self._retry_at = 0.0

    @property
    def down(self) -> bool:
        with self._lock:
            return self._failures > 0

    @property
    def retry_in_s(self) -> float:
        """Seconds until the next connect is tried (0 = now)."""
        with self._lock:
            return max(0.0, self._retry_at - time.monotonic())

    def connect(self) -> WyomingConnection:
        now = time.monotonic()
        with self._lock:
            wait = self._retry_at - now
        if wait > 0:
            raise self._error(f"Wyoming {self.what} server {self.address} is down; next try in {wait:.1f} s")
        try:
            sock = socket.create_connection((self.address.host, self.address.port), timeout=self.timeout_s)
        except OSError as exc:
            self._failed(exc)
            raise self._error(f"Wyoming {self.what} server {self.address} unreachable: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small events (audio-stop) go at once
        with self._lock:
            failures, self._failures, self._retry_at = self._failures, 0, 0.0
        if failures:
            log.info("wyoming: %s server %s is back (after %d failed connects)", self.what, self.address,
                     failures)
        return WyomingConnection(sock, self.address, self.timeout_s, self._error)

    def _failed(self, exc: OSError) -> None:
        with self._lock:
            self._failures += 1
            delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self._failures - 1))
            self._retry_at = time.monotonic() + delay
            first = self._failures == 1
        if first:
            log.warning("wyoming: %s server %s unreachable (%s); retrying with backoff", self.what,
                        self.address, exc)

    def describe(self) -> Info | None:
        """The server's Info, or None when it cannot be asked now (logged; the engine still loads)."""
        try:
            conn = self.connect()
        except self._error as exc:  # the link logged it (once per outage)
            log.debug("wyoming: %s", exc)
            return None
        try:
            conn.send(Describe().event())
            deadline = time.monotonic() + min(self.timeout_s, DESCRIBE_TIMEOUT_S)  # start-up waits little
            while True:
                event = conn.receive(deadline - time.monotonic())
                if Info.is_type(event.type):
                    return Info.from_event(event)
        except self._error as exc:
            log.warning("wyoming: describing %s failed: %s", self.address, exc)
            return None
        finally:
            conn.close()


class PcmConverter:
    """Whatever a Wyoming server streams (any rate, width, channels) → int16 mono PCM at `rate`."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._shape = AudioChunkConverter(width=2, channels=1)
        self._resampler: Resampler | None = None

    def convert(self, chunk: AudioChunk) -> bytes:
        pcm = self._shape.convert(chunk).audio
        if chunk.rate == self.rate:
            return pcm
        if self._resampler is None or self._resampler.src_rate != chunk.rate:
            self._resampler = Resampler(chunk.rate, self.rate)  # soxr, as for every other stream in Wren
        return self._resampler.process(pcm)

    def flush(self) -> bytes:
        resampler, self._resampler = self._resampler, None
        return resampler.flush() if resampler is not None else b""
