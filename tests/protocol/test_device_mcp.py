"""The device MCP dialect (shared_protocol.device_mcp): the device-side Server every device here is built
on (firmware, test devices), argument binding, tool results, paging, and what the client reads."""

import json

import pytest

from shared_protocol import ProtocolError, constants, device_mcp, jsonrpc, messages, validation


class Board(device_mcp.Server):
    """A device with two tools and one user-only tool, failing on demand."""

    def __init__(self) -> None:
        super().__init__("test-board", "1.2.3")
        self.calls: list[tuple[str, dict | None]] = []

    def describe_tools(self) -> list[dict]:
        empty = {"type": "object", "properties": {}}
        volume = {"type": "integer", "minimum": 0, "maximum": 100}
        return [
            {"name": "self.audio_speaker.set_volume", "description": "Set the volume.",
             "inputSchema": {"type": "object", "properties": {"volume": volume}, "required": ["volume"]}},
            {"name": "self.boom", "description": "Fails.", "inputSchema": empty},
            {"name": "self.reboot", "description": "Reboot.", "inputSchema": empty,
             "annotations": {"audience": ["user"]}},
        ]

    def call_tool(self, name: str, arguments: dict | None) -> object:
        self.calls.append((name, arguments))
        if name == "self.audio_speaker.set_volume":
            return device_mcp.bind("volume", {"type": "integer", "minimum": 0, "maximum": 100}, arguments) > 0
        if name == "self.boom":
            raise RuntimeError("the motor is stuck")
        if name == "self.reboot":
            return True
        raise device_mcp.CallError(device_mcp.UNKNOWN_TOOL + name)


def call(i: int, params: object = None) -> dict:
    msg: dict = {"jsonrpc": "2.0", "id": i, "method": "tools/call"}
    if params is not None:
        msg["params"] = params
    return msg


def error_text(reply: dict) -> str:
    assert "code" not in reply["error"]  # the device's error object: a message only (§4.2)
    return reply["error"]["message"]


@pytest.mark.parametrize(
    "payload",
    [
        {"jsonrpc": "2.0", "id": "7", "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": True, "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 3, "method": "notifications/cancelled"},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": [1]},
        {"jsonrpc": "2.0", "id": 5, "result": {}},
        {"jsonrpc": "1.0", "id": 6, "method": "tools/list"},
        "not an object",
    ],
)
def test_requests_the_device_drops_get_no_reply(payload: object) -> None:
    assert Board().handle(payload) is None


def test_initialize_reports_the_board_and_keeps_the_vision_capability() -> None:
    board = Board()
    reply = board.handle({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2024-11-05", "capabilities": {"vision": {"url": "http://x/v", "token": "t"}}}})
    assert reply == {"jsonrpc": "2.0", "id": 1, "result": {
        "protocolVersion": "2024-11-05", "capabilities": {"tools": {}},
        "serverInfo": {"name": "test-board", "version": "1.2.3"}}}
    assert board.vision == {"url": "http://x/v", "token": "t"}
    assert device_mcp.initialize_result("test-board", "1.2.3") == reply["result"]


def test_tools_list_skips_user_only_tools_unless_asked() -> None:
    board = Board()
    plain = board.handle({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]
    assert [t["name"] for t in plain["tools"]] == ["self.audio_speaker.set_volume", "self.boom"]
    assert "nextCursor" not in plain
    full = board.handle({"jsonrpc": "2.0", "id": 2, "method": "tools/list",
                         "params": {"cursor": "", "withUserTools": True}})["result"]
    assert [t["name"] for t in full["tools"]][-1] == "self.reboot"


def test_tools_list_pages_by_the_servers_page_size() -> None:
    board = Board()
    board.max_page_bytes = 250  # room for one tool per page
    first = board.handle({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]
    assert [t["name"] for t in first["tools"]] == ["self.audio_speaker.set_volume"]
    assert first["nextCursor"] == "self.boom"
    second = board.handle({"jsonrpc": "2.0", "id": 3, "method": "tools/list",
                           "params": {"cursor": first["nextCursor"]}})["result"]
    assert [t["name"] for t in second["tools"]] == ["self.boom"] and "nextCursor" not in second


def test_tools_call_errors_are_the_firmwares_texts_in_the_firmwares_order() -> None:
    board = Board()
    replies = [
        board.handle(call(1)),
        board.handle(call(2, {"arguments": {}})),
        board.handle(call(3, {"name": 7})),
        board.handle(call(4, {"name": "self.nope", "arguments": [1]})),  # arguments are checked first
        board.handle(call(5, {"name": "self.nope", "arguments": None})),  # a JSON null is present, not absent
        board.handle(call(6, {"name": "self.nope"})),
        board.handle(call(7, {"name": "self.audio_speaker.set_volume", "arguments": {}})),
        board.handle(call(8, {"name": "self.audio_speaker.set_volume", "arguments": {"volume": "50"}})),
        board.handle(call(9, {"name": "self.audio_speaker.set_volume", "arguments": {"volume": -1}})),
        board.handle(call(10, {"name": "self.audio_speaker.set_volume", "arguments": {"volume": 101}})),
        board.handle(call(11, {"name": "self.boom", "arguments": {}})),
        board.handle({"jsonrpc": "2.0", "id": 12, "method": "resources/list"}),
    ]
    assert [error_text(r) for r in replies] == [
        "Missing params",
        "Missing name",
        "Missing name",
        "Invalid arguments",
        "Invalid arguments",
        "Unknown tool: self.nope",
        "Missing valid argument: volume",
        "Missing valid argument: volume",
        "Value is below minimum allowed: 0",
        "Value exceeds maximum allowed: 100",
        "the motor is stuck",
        "Method not implemented: resources/list",
    ]
    assert [r["id"] for r in replies] == list(range(1, 13))


def test_a_tool_result_is_one_text_item_never_is_error() -> None:
    board = Board()
    reply = board.handle(call(1, {"name": "self.audio_speaker.set_volume", "arguments": {"volume": 30}}))
    assert reply == {"jsonrpc": "2.0", "id": 1,
                     "result": {"content": [{"type": "text", "text": "true"}], "isError": False}}
    assert board.calls == [("self.audio_speaker.set_volume", {"volume": 30})]
    board.handle(call(2, {"name": "self.reboot"}))
    assert board.calls[-1] == ("self.reboot", None)  # no arguments key: None, not {}


@pytest.mark.parametrize(
    ("schema", "arguments", "value"),
    [
        ({"type": "integer"}, {"v": 55.9}, 55),  # a JSON number, truncated
        ({"type": "integer", "default": 7}, {"v": True}, 7),  # a bool is no integer: the default
        ({"type": "integer", "default": 7}, None, 7),
        ({"type": "boolean"}, {"v": False}, False),
        ({"type": "string"}, {"v": "dark"}, "dark"),
        ({"type": "string", "default": "x"}, {"v": 3}, "x"),
    ],
)
def test_bind_matches_json_types_like_the_device(schema: dict, arguments: dict | None, value: object) -> None:
    assert device_mcp.bind("v", schema, arguments) == value


def test_bind_without_default_or_in_range_fails_with_the_device_text() -> None:
    with pytest.raises(device_mcp.CallError, match=r"^Missing valid argument: v$"):
        device_mcp.bind("v", {"type": "boolean"}, {"v": 1})
    with pytest.raises(device_mcp.CallError, match=r"^Value exceeds maximum allowed: 10$"):
        device_mcp.bind("v", {"type": "integer", "maximum": 10}, {"v": 10.5e1})


@pytest.mark.parametrize(
    ("annotations", "user_only"),
    [
        ({"audience": ["user"]}, True),
        ({"audience": ["user", "assistant"]}, False),
        ({"audience": "user"}, False),
        ({}, False),
        (None, False),
    ],
)
def test_is_user_only(annotations: object, user_only: bool) -> None:
    tool: dict = {"name": "t"}
    if annotations is not None:
        tool["annotations"] = annotations
    assert device_mcp.is_user_only(tool) is user_only


def test_close_codes_are_distinct_and_each_has_a_reason() -> None:
    codes = {name: getattr(constants, name) for name in dir(constants) if name.startswith("CLOSE_")
             and name != "CLOSE_REASONS"}
    assert len(set(codes.values())) == len(codes)  # 4400 means one thing only
    assert set(constants.CLOSE_REASONS) == set(codes.values())
    assert codes["CLOSE_MISSING_DEVICE_ID"] == 4400 and codes["CLOSE_BAD_HELLO"] == 4422


def test_the_parser_knows_every_message_type_but_the_wren_extension() -> None:
    types = {getattr(constants, n) for n in dir(constants) if n.startswith("TYPE_")}
    assert types - set(validation.MESSAGE_TYPES) == {constants.TYPE_WREN_TIMERS}
    assert messages.LISTEN_MODES == constants.LISTEN_MODES == ("auto", "manual", "realtime")


def test_result_response_round_trips_through_the_mcp_envelope() -> None:
    response = jsonrpc.result(7, device_mcp.text_content("true"))
    frame = messages.encode(messages.mcp(response, "sess"))
    payload = messages.parse(frame)["payload"]
    assert jsonrpc.classify(payload) == "response"
    assert device_mcp.result_text(payload["result"]) == "true"


def test_text_content_is_the_device_tool_result_shape() -> None:
    assert device_mcp.text_content("42") == {"content": [{"type": "text", "text": "42"}], "isError": False}


def test_result_text_skips_non_text_items_and_fails_without_any() -> None:
    result = {
        "content": [{"type": "image", "image": "{}"}, {"type": "text", "text": "seen"}],
        "isError": False,
    }
    assert device_mcp.result_text(result) == "seen"
    with pytest.raises(ProtocolError) as caught:
        device_mcp.result_text({"content": [{"type": "image"}]})
    assert caught.value.field == "result.content"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, "true"),
        (False, "false"),
        (70, "70"),
        ("dark", "dark"),
        ({"volume": 70}, '{"volume":70}'),
        ([1], "[1]"),
    ],
)
def test_to_text_renders_tool_values_like_the_device(value, text: str) -> None:
    assert device_mcp.to_text(value) == text


def make_tools(count: int, description_bytes: int) -> list[dict]:
    return [
        {
            "name": "self.tool_" + str(i),
            "description": "d" * description_bytes,
            "inputSchema": {"type": "object", "properties": {"level": {"type": "integer", "minimum": 0}}},
        }
        for i in range(count)
    ]


def test_paging_loop_returns_every_tool_once_in_order_within_the_size_limit() -> None:
    tools = make_tools(60, 450)
    seen = []
    cursor = None
    pages = 0
    while True:
        page, cursor = device_mcp.paginate(tools, cursor)
        pages += 1
        result = device_mcp.tools_list_result(page, cursor)
        assert len(messages.encode(result).encode("utf-8")) <= 8000
        seen.extend(tool["name"] for tool in page)
        if cursor is None:
            assert "nextCursor" not in result
            break
        assert result["nextCursor"] == cursor
        assert cursor == tools[len(seen)]["name"]  # the cursor names the first tool left out
    assert seen == [tool["name"] for tool in tools]
    assert pages > 1


def test_paging_counts_utf8_bytes_not_characters() -> None:
    ascii_tools = make_tools(30, 200)
    wide_tools = [dict(tool, description="你" * 200) for tool in ascii_tools]
    ascii_page, _ = device_mcp.paginate(ascii_tools, None)
    wide_page, _ = device_mcp.paginate(wide_tools, None)
    assert len(wide_page) < len(ascii_page)
    assert len(json.dumps(device_mcp.tools_list_result(wide_page), ensure_ascii=False).encode()) <= 8000


def test_a_tool_too_big_for_any_page_gives_the_device_error_message() -> None:
    with pytest.raises(ProtocolError) as caught:
        device_mcp.paginate(make_tools(1, 9000), None)
    assert str(caught.value) == "Failed to add tool self.tool_0 because of payload size limit"
    assert caught.value.field is None


