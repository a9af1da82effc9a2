"""Validation rules for JSON text frames, one small function per message type (reference §3-§5).

Strict where a wrong value would break the peer (rates, modes, transport, the types of fields the
device reads); liberal where real devices are (missing ``session_id``, unknown extra fields,
unknown ``tts`` states, glyph payloads the device would drop on its own).
"""

from shared_protocol.constants import (
    LISTEN_DETECT,
    LISTEN_MODES,
    LISTEN_START,
    LISTEN_STATES,
    TTS_SENTENCE_START,
    TYPE_ABORT,
    TYPE_ALERT,
    TYPE_CUSTOM,
    TYPE_ERROR,
    TYPE_GOODBYE,
    TYPE_HELLO,
    TYPE_IOT,
    TYPE_LISTEN,
    TYPE_LLM,
    TYPE_MCP,
    TYPE_PING,
    TYPE_PONG,
    TYPE_STT,
    TYPE_SYSTEM,
    TYPE_TTS,
)
from shared_protocol.errors import ProtocolError, UnknownMessageType

FORMATS = ("opus", "pcm")
SAMPLE_RATES = (8000, 12000, 16000, 24000, 48000)
FRAME_DURATIONS = (5, 10, 20, 40, 60, 80, 100, 120)
TRANSPORTS = ("websocket", "udp")
PROTOCOL_VERSIONS = (1, 2, 3)
KNOWN_FEATURES = ("aec", "mcp", "glyph_push")

# Downlink defaults the device applies when the server hello leaves them out (reference §3.2).
DEFAULT_DOWNLINK_RATE = 24000
DEFAULT_FRAME_DURATION = 60


# ---- small checks -------------------------------------------------------------------------------


def _fail(field, problem):
    raise ProtocolError(problem, field)


def _is_int(value):
    # In CPython bool is an int; a JSON true/false must never pass as an integer.
    return isinstance(value, int) and not isinstance(value, bool)


def _path(prefix, key):
    return key if not prefix else prefix + "." + key


def _check_str(msg, key, required, prefix=""):
    if key not in msg:
        if required:
            _fail(_path(prefix, key), "is required")
        return None
    value = msg[key]
    if not isinstance(value, str):
        _fail(_path(prefix, key), "must be a string")
    return value


def _check_obj(msg, key, required, prefix=""):
    if key not in msg:
        if required:
            _fail(_path(prefix, key), "is required")
        return None
    value = msg[key]
    if not isinstance(value, dict):
        _fail(_path(prefix, key), "must be an object")
    return value


def _check_choice(msg, key, choices, required, prefix=""):
    value = _check_str(msg, key, required, prefix)
    if value is not None and value not in choices:
        _fail(_path(prefix, key), "must be one of " + ", ".join(choices) + " (got " + repr(value) + ")")
    return value


def _check_int_choice(msg, key, choices, prefix=""):
    if key not in msg:
        return None
    value = msg[key]
    field = _path(prefix, key)
    if not _is_int(value):
        _fail(field, "must be an integer")
    if value not in choices:
        _fail(field, "must be one of " + ", ".join([str(c) for c in choices]) + " (got " + str(value) + ")")
    return value


def _check_session_id(msg):
    # Absent on old clients' device messages and on xinnan's mcp; null from the MQTT gateway.
    if "session_id" in msg and msg["session_id"] is not None and not isinstance(msg["session_id"], str):
        _fail("session_id", "must be a string")


def _check_safe_session_id(session_id):
    # The device splices session_id into its JSON without escaping: plain printable ASCII only.
    for ch in session_id:
        if ch < " " or ch > "~" or ch == '"' or ch == "\\":
            _fail("session_id", "must be printable ASCII without quotes or backslashes")


def check_audio_params(params, prefix="audio_params"):
    """Validate an audio_params object; every field is optional (the device applies defaults)."""
    if not isinstance(params, dict):
        _fail(prefix, "must be an object")
    _check_choice(params, "format", FORMATS, False, prefix)
    _check_int_choice(params, "sample_rate", SAMPLE_RATES, prefix)
    _check_int_choice(params, "channels", (1,), prefix)
    _check_int_choice(params, "frame_duration", FRAME_DURATIONS, prefix)
    return params


# ---- per-type validators ------------------------------------------------------------------------


def _v_hello(msg):
    _check_choice(msg, "transport", TRANSPORTS, True)
    _check_int_choice(msg, "version", PROTOCOL_VERSIONS)
    if "audio_params" in msg:
        check_audio_params(msg["audio_params"])
    features = _check_obj(msg, "features", False)
    if features is not None:
        for name in KNOWN_FEATURES:
            if name in features and not isinstance(features[name], bool):
                _fail("features." + name, "must be true or false")
    _check_obj(msg, "text_font", False)
    if isinstance(msg.get("session_id"), str):
        _check_safe_session_id(msg["session_id"])
    udp = _check_obj(msg, "udp", False)
    if udp is not None:
        _check_udp(udp)


def _check_udp(udp):
    # MQTT+UDP server hello (reference §7.2): the device ignores the hello if any of these is off.
    _check_str(udp, "server", True, "udp")
    port = udp.get("port")
    if not _is_int(port) or port < 1 or port > 65535:
        _fail("udp.port", "must be an integer in 1..65535")
    for key in ("key", "nonce"):
        value = _check_str(udp, key, True, "udp")
        if len(value) != 32 or not _is_hex(value):
            _fail("udp." + key, "must be 32 hex characters (16 bytes)")


def _is_hex(text):
    for ch in text:
        if ch not in "0123456789abcdefABCDEF":
            return False
    return True


def _v_listen(msg):
    state = _check_choice(msg, "state", LISTEN_STATES, True)
    if state == LISTEN_START:
        _check_choice(msg, "mode", LISTEN_MODES, True)
    elif state == LISTEN_DETECT:
        _check_str(msg, "text", True)


def _v_abort(msg):
    _check_str(msg, "reason", False)


def _v_mcp(msg):
    _check_obj(msg, "payload", True)


def _v_iot(msg):
    # Legacy (firmware < 1.8): accepted so it can be logged and ignored, lists checked only.
    for key in ("descriptors", "states", "commands"):
        if key in msg and not isinstance(msg[key], list):
            _fail(key, "must be a list")


def _v_stt(msg):
    _check_str(msg, "text", True)


def _v_llm(msg):
    _check_str(msg, "emotion", True)
    _check_str(msg, "text", False)


def _v_tts(msg):
    state = _check_str(msg, "state", True)
    # Other states (e.g. sentence_end) are ignored by the device, so they are accepted here.
    if state == TTS_SENTENCE_START:
        _check_str(msg, "text", True)


def _v_system(msg):
    _check_str(msg, "command", True)


def _v_alert(msg):
    for key in ("status", "message", "emotion"):
        _check_str(msg, key, True)


def _v_custom(msg):
    pass


def _v_nothing(msg):
    pass


def _v_pong(msg):
    if "timestamp" in msg:
        value = msg["timestamp"]
        if not (isinstance(value, str) or _is_int(value) or isinstance(value, float)):
            _fail("timestamp", "must be a string or a number")


def _v_error(msg):
    _check_str(msg, "message", False)


_VALIDATORS = {
    TYPE_HELLO: _v_hello,
    TYPE_LISTEN: _v_listen,
    TYPE_ABORT: _v_abort,
    TYPE_MCP: _v_mcp,
    TYPE_IOT: _v_iot,
    TYPE_GOODBYE: _v_nothing,
    TYPE_STT: _v_stt,
    TYPE_LLM: _v_llm,
    TYPE_TTS: _v_tts,
    TYPE_SYSTEM: _v_system,
    TYPE_ALERT: _v_alert,
    TYPE_CUSTOM: _v_custom,
    TYPE_PING: _v_nothing,
    TYPE_PONG: _v_pong,
    TYPE_ERROR: _v_error,  # sent by the MQTT gateway when its upstream fails
}

MESSAGE_TYPES = tuple(sorted(_VALIDATORS))


def validate(msg):
    """Check a decoded message dict in place; return it, or raise ProtocolError."""
    if not isinstance(msg, dict):
        _fail(None, "message must be a JSON object")
    msg_type = msg.get("type")
    if msg_type is None:
        _fail("type", "is required")
    if not isinstance(msg_type, str):
        _fail("type", "must be a string")
    validator = _VALIDATORS.get(msg_type)
    if validator is None:
        raise UnknownMessageType(msg_type)
    _check_session_id(msg)
    validator(msg)
    return msg
