"""JSON text frames of the xiaozhi protocol: constructors, ``encode`` and a validating ``parse``.

Every message is a plain dict. Constructors validate what they build, so a frame we send always
passes our own parser. ``parse`` is used for both directions; it is strict where a wrong value
would break the peer (rates, modes, transport, types of fields the device reads) and liberal
where real devices are (missing ``session_id``, unknown extra fields, unknown ``tts`` states).

MicroPython-compatible: only ``json``; no typing, dataclasses or dict-order assumptions.
"""

import json
import sys

from shared_protocol.constants import (
    LISTEN_DETECT,
    LISTEN_START,
    LISTEN_STOP,
    TTS_SENTENCE_START,
    TTS_START,
    TTS_STOP,
    TYPE_ABORT,
    TYPE_ALERT,
    TYPE_GOODBYE,
    TYPE_HELLO,
    TYPE_LISTEN,
    TYPE_LLM,
    TYPE_MCP,
    TYPE_PING,
    TYPE_PONG,
    TYPE_STT,
    TYPE_SYSTEM,
    TYPE_TTS,
)
from shared_protocol.errors import ProtocolError
from shared_protocol.validation import (  # noqa: F401 - re-exported for callers
    DEFAULT_DOWNLINK_RATE,
    DEFAULT_FRAME_DURATION,
    FORMATS,
    FRAME_DURATIONS,
    LISTEN_MODES,
    LISTEN_STATES,
    MESSAGE_TYPES,
    SAMPLE_RATES,
    TRANSPORTS,
    check_audio_params,
    validate,
)

_MICROPYTHON = sys.implementation.name == "micropython"


def _fail(field, problem):
    raise ProtocolError(problem, field)


def parse(data):
    """Decode and validate one text frame (str, bytes or an already-decoded dict)."""
    if isinstance(data, dict):
        return validate(data)
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            data = str(bytes(data), "utf-8")
        except UnicodeError:
            _fail(None, "frame is not valid UTF-8")
    if not isinstance(data, str):
        _fail(None, "frame must be str, bytes or dict")
    try:
        msg = json.loads(data)
    except ValueError:  # CPython's JSONDecodeError and MicroPython's error are both ValueErrors
        _fail(None, "frame is not valid JSON")
    except RuntimeError:  # CPython's RecursionError on absurdly deep nesting
        _fail(None, "frame nests too deeply")
    return validate(msg)


def encode(msg):
    """Compact JSON text for a message dict (UTF-8 kept as is, no ASCII escaping)."""
    if not isinstance(msg, dict):
        _fail(None, "message must be a dict")
    try:
        if not _MICROPYTHON:
            return json.dumps(msg, separators=(",", ":"), ensure_ascii=False)
        # MicroPython has no ensure_ascii (it never escapes non-ASCII); ports older than 1.23
        # have no separators either, and then the text only carries a few harmless spaces.
        try:
            return json.dumps(msg, separators=(",", ":"))
        except TypeError:
            return json.dumps(msg)
    except (TypeError, ValueError) as err:
        _fail(None, "message is not JSON-serialisable: " + str(err))


# ---- constructors -------------------------------------------------------------------------------


def _with_session(msg, session_id):
    if session_id is not None:
        msg["session_id"] = session_id
    return msg


def audio_params(format="opus", sample_rate=16000, channels=1, frame_duration=60):
    """Audio parameters; ``pcm`` means 16-bit little-endian mono."""
    return check_audio_params(
        {"format": format, "sample_rate": sample_rate, "channels": channels, "frame_duration": frame_duration}
    )


def hello_device(version=1, features=None, audio_params=None, transport="websocket"):
    """Device hello. Defaults match current firmware: features.mcp true, 16 kHz/60 ms Opus uplink."""
    msg = {
        "type": TYPE_HELLO,
        "version": version,
        "features": {"mcp": True} if features is None else features,
        "transport": transport,
        "audio_params": _default_uplink() if audio_params is None else audio_params,
    }
    return validate(msg)


def _default_uplink():
    return {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60}


def hello_server(session_id, audio_params, transport="websocket"):
    """Server hello (the reply). ``transport`` is mandatory: the device crashes without it."""
    if not isinstance(session_id, str) or not session_id:
        _fail("session_id", "must be a non-empty string")
    return validate(
        {"type": TYPE_HELLO, "transport": transport, "session_id": session_id, "audio_params": audio_params}
    )


def listen_start(session_id, mode):
    return validate(_with_session({"type": TYPE_LISTEN, "state": LISTEN_START, "mode": mode}, session_id))


def listen_stop(session_id):
    return validate(_with_session({"type": TYPE_LISTEN, "state": LISTEN_STOP}, session_id))


def listen_detect(session_id, text):
    return validate(_with_session({"type": TYPE_LISTEN, "state": LISTEN_DETECT, "text": text}, session_id))


def abort(session_id, reason=None):
    msg = _with_session({"type": TYPE_ABORT}, session_id)
    if reason is not None:  # a button abort carries no reason key at all
        msg["reason"] = reason
    return validate(msg)


def stt(session_id, text):
    return validate(_with_session({"type": TYPE_STT, "text": text}, session_id))


def llm(session_id, emotion, text=None):
    msg = _with_session({"type": TYPE_LLM, "emotion": emotion}, session_id)
    if text is not None:
        msg["text"] = text
    return validate(msg)


def tts_start(session_id):
    return validate(_with_session({"type": TYPE_TTS, "state": TTS_START}, session_id))


def tts_sentence_start(session_id, text):
    return validate(_with_session({"type": TYPE_TTS, "state": TTS_SENTENCE_START, "text": text}, session_id))


def tts_stop(session_id):
    return validate(_with_session({"type": TYPE_TTS, "state": TTS_STOP}, session_id))


def mcp(payload, session_id=None):
    return validate(_with_session({"type": TYPE_MCP, "payload": payload}, session_id))


def system(session_id, command):
    return validate(_with_session({"type": TYPE_SYSTEM, "command": command}, session_id))


def alert(session_id, status, message, emotion):
    msg = {"type": TYPE_ALERT, "status": status, "message": message, "emotion": emotion}
    return validate(_with_session(msg, session_id))


def goodbye(session_id):
    return validate(_with_session({"type": TYPE_GOODBYE}, session_id))


def ping():
    return {"type": TYPE_PING}


def pong(timestamp):
    return validate({"type": TYPE_PONG, "timestamp": timestamp})


# ---- helpers for readers ------------------------------------------------------------------------


def downlink_audio(server_hello):
    """(sample_rate, frame_duration) the device must decode at, with the device's defaults."""
    params = server_hello.get("audio_params")
    if not isinstance(params, dict):
        params = {}
    rate = params.get("sample_rate", DEFAULT_DOWNLINK_RATE)
    return rate, params.get("frame_duration", DEFAULT_FRAME_DURATION)
