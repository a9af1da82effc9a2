"""Checks one wire vector from vectors.json against shared_protocol.

Shared by the CPython runner (test_vectors.py) and the MicroPython runner (mp_vectors.py), so it
sticks to what both interpreters have: no pytest, no typing, no f-strings with ``=``.
Each ``check_*`` returns None when the vector holds, otherwise a one-line reason.
"""

import json

from shared_protocol import ProtocolError, UnknownMessageType, audio, device_mcp, jsonrpc, messages

KINDS = ("json", "binary", "jsonrpc", "paging")


def _expect_error(vector, call):
    """Run ``call`` and compare the raised ProtocolError with ``vector["error"]``."""
    expected = vector["error"]
    try:
        got = call()
    except UnknownMessageType as err:
        if not expected.get("unknown_type"):
            return "raised UnknownMessageType (" + str(err) + "), expected a plain ProtocolError"
        return _compare_error(expected, err)
    except ProtocolError as err:
        if expected.get("unknown_type"):
            return "raised ProtocolError (" + str(err) + "), expected UnknownMessageType"
        return _compare_error(expected, err)
    except Exception as err:  # anything else escaping a parser is a bug
        return "raised " + type(err).__name__ + ": " + str(err) + " instead of ProtocolError"
    return "expected an error on field " + repr(expected.get("field")) + ", got " + repr(got)


def _compare_error(expected, err):
    if "field" in expected and err.field != expected["field"]:
        got = repr(err.field) + " (" + str(err) + ")"
        return "error on field " + got + ", expected " + repr(expected["field"])
    if "message" in expected and str(err) != expected["message"]:
        return "error message " + repr(str(err)) + ", expected " + repr(expected["message"])
    if err.field is not None and err.field not in str(err):
        return "error message " + repr(str(err)) + " does not name its field"
    return None


def _frame(vector):
    if "frame_hex" in vector:
        return bytes.fromhex(vector["frame_hex"])
    frame = vector["frame"]
    if isinstance(frame, str):
        return frame
    return json.dumps(frame)


def check_json(vector):
    data = _frame(vector)
    if "error" in vector:
        return _expect_error(vector, lambda: messages.parse(data))
    try:
        got = messages.parse(data)
    except Exception as err:
        return "raised " + type(err).__name__ + ": " + str(err)
    if "expect" in vector:
        expected = vector["expect"]
    elif isinstance(vector["frame"], str):
        expected = json.loads(vector["frame"])
    else:
        expected = vector["frame"]
    if got != expected:
        return "parsed to " + repr(got) + ", expected " + repr(expected)
    # A valid frame must survive our own encoder: encode -> parse gives the same object.
    again = messages.parse(messages.encode(got))
    if again != expected:
        return "encode/parse round trip changed it to " + repr(again)
    return None


def check_binary(vector):
    version = vector["version"]
    frame = bytes.fromhex(vector["hex"])
    if "error" in vector:
        problem = _expect_error(vector, lambda: audio.unpack(version, frame))
        if problem:
            return problem
        return _expect_error(vector, lambda: audio.parse_header(version, memoryview(frame)))
    payload = bytes.fromhex(vector["payload_hex"])
    try:
        got = audio.unpack(version, frame)
        offset, length, timestamp = audio.parse_header(version, memoryview(frame))
    except Exception as err:
        return "raised " + type(err).__name__ + ": " + str(err)
    if got != (payload, vector["timestamp"]):
        return "unpacked to " + repr(got) + ", expected " + repr((payload, vector["timestamp"]))
    if bytes(memoryview(frame)[offset : offset + length]) != payload or timestamp != vector["timestamp"]:
        return "parse_header gave " + repr((offset, length, timestamp))
    if vector.get("canonical", True):
        if audio.pack(version, payload, vector["timestamp"]) != frame:
            return "pack gave " + audio.pack(version, payload, vector["timestamp"]).hex()
        buf = bytearray(audio.header_size(version) + len(payload))
        buf[audio.header_size(version) :] = payload
        written = audio.pack_header_into(buf, version, len(payload), vector["timestamp"])
        if written != audio.header_size(version) or bytes(buf) != frame:
            return "pack_header_into gave " + bytes(buf).hex()
    return None


def check_jsonrpc(vector):
    payload = vector["payload"]
    if "error" in vector:
        return _expect_error(vector, lambda: jsonrpc.classify(payload))
    try:
        kind = jsonrpc.classify(payload)
        if kind != vector["kind"]:
            return "classified as " + kind + ", expected " + vector["kind"]
        if "text" in vector and device_mcp.result_text(payload["result"]) != vector["text"]:
            return "result_text gave " + repr(device_mcp.result_text(payload["result"]))
        if "message" in vector and jsonrpc.error_message(payload) != vector["message"]:
            return "error_message gave " + repr(jsonrpc.error_message(payload))
    except Exception as err:
        return "raised " + type(err).__name__ + ": " + str(err)
    return None


def check_paging(vector):
    def run():
        return device_mcp.paginate(
            vector["tools"], vector["cursor"], vector["max_bytes"], vector.get("with_user_tools", True)
        )

    if "error" in vector:
        return _expect_error(vector, run)
    try:
        page, next_cursor = run()
    except Exception as err:
        return "raised " + type(err).__name__ + ": " + str(err)
    names = [tool["name"] for tool in page]
    if names != vector["page"] or next_cursor != vector["next_cursor"]:
        return (
            "paged "
            + repr(names)
            + " next "
            + repr(next_cursor)
            + ", expected "
            + repr(vector["page"])
            + " next "
            + repr(vector["next_cursor"])
        )
    result = device_mcp.tools_list_result(page, next_cursor)
    if (next_cursor is None) == ("nextCursor" in result):
        return "nextCursor must be present exactly when there is a next page"
    return None


CHECKS = {"json": check_json, "binary": check_binary, "jsonrpc": check_jsonrpc, "paging": check_paging}
