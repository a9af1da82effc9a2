"""shared_protocol's API exercised on MicroPython itself (run by test_micropython_api.py).

Prints one line per failed check and ``ran N checks, F failed``; exits 1 on any failure.
"""

import sys

import micropython

from shared_protocol import PROTOCOL_VERSIONS, ProtocolError, UnknownMessageType, audio, jsonrpc, messages

SID = "3f1c7c1e-1d0a-4a7e-9d38-2b1f3c1d9e55"
_results = [0, 0]


def check(name, ok):
    _results[0] += 1
    if not ok:
        _results[1] += 1
        print("FAIL " + name)


def raises_on(name, field, call):
    try:
        call()
    except ProtocolError as err:
        check(name + " names " + str(field) + " (got " + str(err.field) + ")", err.field == field)
        return
    except Exception as err:
        check(name + " raised " + type(err).__name__, False)
        return
    check(name + " did not raise", False)


def round_trips():
    built = [
        messages.hello_device(),
        messages.hello_server(SID, messages.audio_params(sample_rate=24000)),
        messages.listen_start(SID, "auto"),
        messages.listen_stop(SID),
        messages.listen_detect(SID, "你好小智"),
        messages.abort(SID),
        messages.abort(SID, "wake_word_detected"),
        messages.stt(SID, "hi"),
        messages.llm(SID, "happy", "😊"),
        messages.tts_start(SID),
        messages.tts_sentence_start(SID, "Hello."),
        messages.tts_stop(SID),
        messages.mcp(jsonrpc.request(1, "initialize", {"capabilities": {}})),
        messages.system(SID, "reboot"),
        messages.alert(SID, "Warning", "Battery low", "sad"),
        messages.goodbye(SID),
        messages.ping(),
        messages.pong(12),
    ]
    for msg in built:
        text = messages.encode(msg)
        check("round trip " + text, messages.parse(text) == msg)
        check("round trip bytes " + text, messages.parse(text.encode()) == msg)
    check("abort without reason key", "reason" not in messages.abort(SID))
    check(
        "error without code key",
        jsonrpc.error(3, "x") == {"jsonrpc": "2.0", "id": 3, "error": {"message": "x"}},
    )
    check("protocol versions", PROTOCOL_VERSIONS == (1, 2, 3))


def errors():
    raises_on("sample rate", "audio_params.sample_rate", lambda: messages.audio_params(sample_rate=44100))
    raises_on("bool sample rate", "audio_params.sample_rate", lambda: messages.audio_params(sample_rate=True))
    raises_on("mode", "mode", lambda: messages.listen_start(SID, "push"))
    raises_on(
        "server hello transport", "transport", lambda: messages.parse('{"type":"hello","session_id":"s"}')
    )
    raises_on("bad json", None, lambda: messages.parse("{nope"))
    raises_on("bad utf8", None, lambda: messages.parse(b'{"type":"stt","text":"\xff"}'))
    raises_on("string id", "id", lambda: jsonrpc.request("1", "tools/list"))
    raises_on("bool id", "id", lambda: jsonrpc.classify({"jsonrpc": "2.0", "id": True, "method": "x"}))
    raises_on("v2 truncated", "payload_size", lambda: audio.unpack(2, audio.pack(2, b"abc")[:-1]))
    try:
        messages.parse('{"type":"server"}')
        check("unknown type raised", False)
    except UnknownMessageType as err:
        check(
            "unknown type attr", err.type == "server" and err.field == "type" and isinstance(err, ValueError)
        )
    try:
        messages.audio_params(frame_duration=30)
    except ProtocolError as err:
        check("message names field: " + str(err), str(err).startswith("audio_params.frame_duration: "))


def zero_allocation_audio():
    buf = bytearray(16 + 200)
    mv = memoryview(buf)
    results = [0, 0]
    micropython.heap_lock()
    try:
        results[0] = audio.pack_header_into(buf, 2, 120, 5000)
        results[1] = audio.pack_header_into(mv, 3, 200)
    except MemoryError:
        results[0] = -1
    finally:
        micropython.heap_unlock()
    check("pack_header_into allocates nothing", results == [16, 4])
    buf[4 : 4 + 200] = bytes(range(200))
    offset, length, ts = audio.parse_header(3, memoryview(buf)[: 4 + 200])
    check("parse_header", (offset, length, ts) == (4, 200, 0) and mv[offset] == 0 and mv[offset + 199] == 199)


def paging():
    tools = []
    for i in range(24):
        tools.append(
            {
                "name": "self.tool_" + str(i),
                "description": "d" * 700,
                "inputSchema": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0}}},
            }
        )
    cursor = None
    seen = 0
    while True:
        page, cursor = jsonrpc.paginate(tools, cursor)
        size = len(messages.encode(jsonrpc.tools_list_result(page, cursor)).encode())
        check("page within 8000 bytes (" + str(size) + ")", size <= 8000)
        seen += len(page)
        if cursor is None:
            break
        check("cursor names the next tool", cursor == tools[seen]["name"])
    check("all tools paged", seen == len(tools))


round_trips()
errors()
zero_allocation_audio()
paging()
print("ran " + str(_results[0]) + " checks, " + str(_results[1]) + " failed")
sys.exit(1 if _results[1] else 0)
