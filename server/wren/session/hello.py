"""Hello negotiation (reference §4): what the device sends, what the server will decode and encode.

Lenient in what it accepts: a hello may be as small as `{"type":"hello"}` (browser clients send little more):
a missing `transport` is the WebSocket the hello came on, missing `version` is 1 (or the `Protocol-Version`
header, which wins over the hello's), missing `audio_params` fields take the reference defaults (Opus,
16 kHz, mono, 60 ms); fields this server does not use (`device_id`, `device_mac`, `token`) are ignored, the
handshake's identity stands. A device that cannot be served (audio
parameters no decoder takes) is refused with a close code that says why, at once, rather than left
waiting 10 s for a reply that never comes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from shared_protocol.constants import CLOSE_BAD_AUDIO_PARAMS
from wren.pipeline.downlink import DownlinkFormat
from wren.speech.codec import CodecError, make_decoder

log = logging.getLogger(__name__)

UPLINK_DEFAULTS = {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60}


class HelloRefused(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class Negotiated:
    protocol_version: int
    uplink_format: str
    uplink_rate: int
    uplink_frame_ms: int
    decoder: Any
    downlink: DownlinkFormat
    features: dict


def with_transport(text: str) -> str | dict:
    """A device hello without `transport` (minimal browser clients) came on a WebSocket: say so, so that the
    shared parser, which requires the field (a hello without it crashes the official firmware, reference
    §3.2), validates the rest. Any other frame is returned as it is."""
    if '"hello"' not in text or '"transport"' in text:
        return text
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, dict) and data.get("type") == "hello" and "transport" not in data:
        return {**data, "transport": "websocket"}
    return text


def looks_like_hello(text: str) -> bool:
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("type") == "hello"


def negotiate(msg: dict, header_version: int | None, configured: DownlinkFormat, name: str) -> Negotiated:
    """The session's audio and framing for this hello; `HelloRefused` if it cannot be served."""
    params = {**UPLINK_DEFAULTS, **(msg.get("audio_params") or {})}
    hello_version = msg.get("version")
    if header_version and hello_version and hello_version != header_version:
        log.info("%s: hello version %s differs from Protocol-Version %s; using the header",
                 name, hello_version, header_version)
    try:
        decoder = make_decoder(params["format"], params["sample_rate"], params["channels"],
                               params["frame_duration"])
    except CodecError as exc:
        log.warning("%s: unusable uplink audio_params %s: %s", name, params, exc)
        raise HelloRefused(CLOSE_BAD_AUDIO_PARAMS, f"unsupported audio_params: {exc}"[:120]) from None
    downlink = configured
    if params["format"] == "pcm":
        # No Opus on the device (e.g. the MicroPython firmware): PCM at its own rate, 60 ms frames.
        downlink = DownlinkFormat("pcm", params["sample_rate"], 60)
    return Negotiated(
        protocol_version=header_version or hello_version or 1,
        uplink_format=params["format"],
        uplink_rate=params["sample_rate"],
        uplink_frame_ms=params["frame_duration"],
        decoder=decoder,
        downlink=downlink,
        features=msg.get("features") or {},
    )
