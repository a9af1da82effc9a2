"""JSON-RPC 2.0 as the device speaks it: constructors and classification (MCP on top: test_device_mcp.py)."""


import pytest

from shared_protocol import ProtocolError, jsonrpc


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
