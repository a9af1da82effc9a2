"""shared_protocol's API exercised on MicroPython itself (run by test_micropython_api.py).

Prints one line per failed check and ``ran N checks, F failed``; exits 1 on any failure.
"""

import sys

import micropython

from shared_protocol import (
    PROTOCOL_VERSIONS,
    ProtocolError,
    UnknownMessageType,
    audio,
    constants,
    device_mcp,
    jsonrpc,
    messages,
)

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
        page, cursor = device_mcp.paginate(tools, cursor)
        size = len(messages.encode(device_mcp.tools_list_result(page, cursor)).encode())
        check("page within 8000 bytes (" + str(size) + ")", size <= 8000)
        seen += len(page)
        if cursor is None:
            break
        check("cursor names the next tool", cursor == tools[seen]["name"])
    check("all tools paged", seen == len(tools))


class _Board(device_mcp.Server):
    # A device with one tool, on MicroPython itself: the dialect class the firmware builds on.
    def describe_tools(self):
        schema = {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0}}, "required": ["v"]}
        return [{"name": "self.x", "description": "d", "inputSchema": schema}]

    def call_tool(self, name, arguments):
        if name != "self.x":
            raise device_mcp.CallError(device_mcp.UNKNOWN_TOOL + name)
        return device_mcp.bind("v", {"type": "integer", "minimum": 0}, arguments)


def device_side():
    board = _Board("b", "1")
    init = board.handle(jsonrpc.request(1, "initialize", {"capabilities": {"vision": {"url": "u"}}}))
    check("mcp initialize", init["result"]["serverInfo"] == {"name": "b", "version": "1"})
    check("mcp vision kept", board.vision == {"url": "u", "token": None})
    string_id = {"jsonrpc": "2.0", "id": "1", "method": "tools/list"}
    check("mcp string id dropped", board.handle(string_id) is None)
    check("mcp notification ignored", board.handle(jsonrpc.notification("notifications/initialized")) is None)
    page = board.handle(jsonrpc.request(2, "tools/list"))["result"]
    check("mcp one page", [t["name"] for t in page["tools"]] == ["self.x"] and "nextCursor" not in page)
    called = board.handle(jsonrpc.request(3, "tools/call", {"name": "self.x", "arguments": {"v": 4.7}}))
    check("mcp call truncates", called["result"] == device_mcp.text_content("4"))
    texts = [
        board.handle(jsonrpc.request(4, "tools/call", {"name": "self.x", "arguments": {"v": True}})),
        board.handle(jsonrpc.request(5, "tools/call", {"name": "self.x", "arguments": {"v": -1}})),
        board.handle(jsonrpc.request(6, "tools/call", {"name": "self.y"})),
        board.handle(jsonrpc.request(7, "tools/call")),
        board.handle(jsonrpc.request(8, "resources/list")),
    ]
    check("mcp error texts", [jsonrpc.error_message(t) for t in texts] == [
        "Missing valid argument: v", "Value is below minimum allowed: 0", "Unknown tool: self.y",
        "Missing params", "Method not implemented: resources/list"])
    check("mcp errors without code", [t for t in texts if "code" in t["error"]] == [])
    check("close codes", constants.CLOSE_BAD_HELLO == 4422 and constants.CLOSE_MISSING_DEVICE_ID == 4400)
    check("close reasons", constants.CLOSE_REASONS[constants.CLOSE_UNAUTHORIZED] == "unauthorized")
    check("listen modes", messages.LISTEN_MODES == constants.LISTEN_MODES)


round_trips()
errors()
device_side()
zero_allocation_audio()
paging()
print("ran " + str(_results[0]) + " checks, " + str(_results[1]) + " failed")
sys.exit(1 if _results[1] else 0)
