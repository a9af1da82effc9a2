"""The protocol's names and numbers, written once: close codes, listen modes and states, tts states and
message types (reference §1, §5; docs/protocol.md). Firmware and server import them from here.

MicroPython-safe: plain assignments only (no enum, typing or dataclasses), and imports nothing.
"""

# ---- WebSocket close codes (docs/protocol.md §1) ------------------------------------------------
# RFC 6455 codes Wren sends (1005 and 1006 never go on the wire; the firmware's ws.py has them).
CLOSE_NORMAL = 1000  # the session is over (idle timeout, goodbye after empty turns, the device hung up)
CLOSE_GOING_AWAY = 1001  # the server is shutting down
CLOSE_PROTOCOL_ERROR = 1002  # the peer broke RFC 6455 (a masked server frame, reserved bits, bad opcode)
CLOSE_POLICY = 1008  # RFC 6455 "policy violation": the device broke a server limit (uplink far too fast)
CLOSE_TOO_BIG = 1009  # a message larger than the receiver accepts (checked on the declared length)
CLOSE_SEND_TIMEOUT = 1011  # RFC 6455 "unexpected condition": the device stopped reading (a write hung 10 s)
# Wren's own (4000-4999 are for applications): 44xx after the HTTP status they resemble.
CLOSE_MISSING_DEVICE_ID = 4400  # no Device-Id header and no device-id query parameter
CLOSE_UNAUTHORIZED = 4401  # no valid bearer token for this device (missing, malformed, expired)
CLOSE_NO_HELLO = 4408  # no device hello within the server's hello timeout
CLOSE_BAD_AUDIO_PARAMS = 4415  # the hello's audio_params ask for audio the server cannot decode
CLOSE_BAD_HELLO = 4422  # the first text frame is not a valid device hello

CLOSE_REASONS = {
    CLOSE_NORMAL: "normal closure",
    CLOSE_GOING_AWAY: "server shutting down",
    CLOSE_PROTOCOL_ERROR: "protocol error",
    CLOSE_POLICY: "policy violation",
    CLOSE_TOO_BIG: "message too big",
    CLOSE_SEND_TIMEOUT: "send timeout",
    CLOSE_MISSING_DEVICE_ID: "missing device id",
    CLOSE_UNAUTHORIZED: "unauthorized",
    CLOSE_NO_HELLO: "no hello",
    CLOSE_BAD_AUDIO_PARAMS: "unsupported audio params",
    CLOSE_BAD_HELLO: "invalid hello",
}

# ---- listen (D->S, reference §5.1) --------------------------------------------------------------
MODE_AUTO = "auto"  # the server's VAD ends the turn
MODE_MANUAL = "manual"  # push-to-talk: the turn ends with listen stop
MODE_REALTIME = "realtime"  # the mic stays open while speaking; the server handles barge-in
LISTEN_MODES = (MODE_AUTO, MODE_MANUAL, MODE_REALTIME)

LISTEN_START = "start"
LISTEN_STOP = "stop"
LISTEN_DETECT = "detect"  # a wake word was heard (or typed text is injected)
LISTEN_STATES = (LISTEN_START, LISTEN_STOP, LISTEN_DETECT)

# ---- tts (S->D, reference §5.5); other states are accepted and ignored ---------------------------
TTS_START = "start"
TTS_STOP = "stop"
TTS_SENTENCE_START = "sentence_start"

SYSTEM_REBOOT = "reboot"  # the only system command

# ---- message types (reference §5) ---------------------------------------------------------------
TYPE_HELLO = "hello"
TYPE_LISTEN = "listen"
TYPE_ABORT = "abort"
TYPE_MCP = "mcp"
TYPE_IOT = "iot"  # legacy, firmware < 1.8
TYPE_GOODBYE = "goodbye"  # MQTT only
TYPE_STT = "stt"
TYPE_LLM = "llm"
TYPE_TTS = "tts"
TYPE_SYSTEM = "system"
TYPE_ALERT = "alert"
TYPE_CUSTOM = "custom"
TYPE_PING = "ping"  # non-official clients
TYPE_PONG = "pong"
TYPE_ERROR = "error"  # from the MQTT gateway when its upstream fails
# Wren's extension (docs/protocol.md §8): the parser does not know it, so stock devices and our own
# parse() treat it as an unknown type; the firmware reads it leniently (wren_device/keeper.py).
TYPE_WREN_TIMERS = "wren_timers"
