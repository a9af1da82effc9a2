"""The device MCP JSON-RPC dialect: constructors, classification, tool results and paging."""

import json

import pytest

from shared_protocol import ProtocolError, jsonrpc, messages


def test_request_and_notification_shapes() -> None:
    assert jsonrpc.request(1, "initialize") == {"jsonrpc": "2.0", "id": 1, "method": "initialize"}
    assert jsonrpc.request(2, "tools/list", {"cursor": ""}) == {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/list",
        "params": {"cursor": ""},
    }
    assert jsonrpc.notification("notifications/initialized") == {
        "jsonrpc": "2.0",
        "method": "notifications/initialized",
    }
    assert jsonrpc.classify(jsonrpc.request(1, "initialize")) == "request"
    assert jsonrpc.classify(jsonrpc.notification("notifications/initialized")) == "notification"


@pytest.mark.parametrize("bad_id", ["1", True, 1.0, None])
def test_request_ids_must_be_integers_because_the_device_drops_others(bad_id) -> None:
    with pytest.raises(ProtocolError) as caught:
        jsonrpc.request(bad_id, "tools/list")
    assert caught.value.field == "id"


def test_request_params_must_be_an_object() -> None:
    with pytest.raises(ProtocolError) as caught:
        jsonrpc.request(1, "tools/call", ["x"])
    assert caught.value.field == "params"


def test_error_has_no_code_unless_given_like_the_device() -> None:
    assert jsonrpc.error(7, "Unknown tool: x") == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"message": "Unknown tool: x"},
    }
    with_code = jsonrpc.error(7, "Method not found", -32601)
    assert with_code["error"] == {"message": "Method not found", "code": -32601}
    assert jsonrpc.error_message(jsonrpc.error(7, "boom")) == "boom"
    assert jsonrpc.error_code(jsonrpc.error(7, "boom")) is None
    assert jsonrpc.error_code(with_code) == -32601


def test_error_message_of_a_non_error_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        jsonrpc.error_message(jsonrpc.result(1, {}))


def test_result_response_round_trips_through_the_mcp_envelope() -> None:
    response = jsonrpc.result(7, jsonrpc.text_content("true"))
    frame = messages.encode(messages.mcp(response, "sess"))
    payload = messages.parse(frame)["payload"]
    assert jsonrpc.classify(payload) == "response"
    assert jsonrpc.result_text(payload["result"]) == "true"


def test_text_content_is_the_device_tool_result_shape() -> None:
    assert jsonrpc.text_content("42") == {"content": [{"type": "text", "text": "42"}], "isError": False}


def test_result_text_skips_non_text_items_and_fails_without_any() -> None:
    result = {
        "content": [{"type": "image", "image": "{}"}, {"type": "text", "text": "seen"}],
        "isError": False,
    }
    assert jsonrpc.result_text(result) == "seen"
    with pytest.raises(ProtocolError) as caught:
        jsonrpc.result_text({"content": [{"type": "image"}]})
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
    assert jsonrpc.to_text(value) == text


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
        page, cursor = jsonrpc.paginate(tools, cursor)
        pages += 1
        result = jsonrpc.tools_list_result(page, cursor)
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
    ascii_page, _ = jsonrpc.paginate(ascii_tools, None)
    wide_page, _ = jsonrpc.paginate(wide_tools, None)
    assert len(wide_page) < len(ascii_page)
    assert len(json.dumps(jsonrpc.tools_list_result(wide_page), ensure_ascii=False).encode()) <= 8000


def test_a_tool_too_big_for_any_page_gives_the_device_error_message() -> None:
    with pytest.raises(ProtocolError) as caught:
        jsonrpc.paginate(make_tools(1, 9000), None)
    assert str(caught.value) == "Failed to add tool self.tool_0 because of payload size limit"
    assert caught.value.field is None


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"jsonrpc": "2.0", "id": "1", "method": "tools/list"}, "id"),
        ({"jsonrpc": "2.0", "id": 1, "method": "x", "params": 3}, "params"),
        ({"jsonrpc": "2.1", "id": 1, "method": "x"}, "jsonrpc"),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": 1}}, "error.message"),
    ],
)
def test_classify_names_the_bad_field(payload: dict, field: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        jsonrpc.classify(payload)
    assert caught.value.field == field
    assert field in str(caught.value)
