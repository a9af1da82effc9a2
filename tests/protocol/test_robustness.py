"""No parser lets anything but ProtocolError escape, whatever junk replaces a field.

Every valid vector in vectors.json is mutated systematically: each field (and each nested field)
is replaced by values of every JSON type or removed, every binary frame is cut at every length.
"""

import json
from pathlib import Path

from shared_protocol import ProtocolError, audio, device_mcp, jsonrpc, messages

DOC = json.loads((Path(__file__).parent / "vectors.json").read_text(encoding="utf-8"))
JUNK = [None, True, False, 0, -1, 1.5, "", "x", [], [1], {}, {"a": 1}]
_MISSING = object()


def mutations(obj, depth=3):
    """Yield deep copies of obj with one field replaced by junk or removed."""
    if depth == 0:
        return
    if isinstance(obj, dict):
        for key in list(obj):
            for value in [*JUNK, _MISSING]:
                copy = json.loads(json.dumps(obj))
                if value is _MISSING:
                    del copy[key]
                else:
                    copy[key] = value
                yield copy
            for inner in mutations(obj[key], depth - 1):
                copy = json.loads(json.dumps(obj))
                copy[key] = inner
                yield copy
    elif isinstance(obj, list) and obj:
        for value in JUNK:
            yield [value, *obj[1:]]
        for inner in mutations(obj[0], depth - 1):
            yield [inner, *obj[1:]]


def only_protocol_errors(call, *args) -> int:
    try:
        call(*args)
    except ProtocolError:
        return 1
    return 0


def valid_json_frames() -> list[dict]:
    frames = []
    for vector in DOC["json"]:
        if "error" in vector:
            continue
        frame = vector.get("frame")
        frames.append(json.loads(frame) if isinstance(frame, str) else frame or vector["expect"])
    return frames


def test_mutated_json_frames_raise_only_protocol_errors() -> None:
    rejected = 0
    tried = 0
    for frame in valid_json_frames():
        for mutated in mutations(frame):
            tried += 1
            rejected += only_protocol_errors(messages.parse, mutated)
            rejected += only_protocol_errors(messages.parse, json.dumps(mutated))
    assert tried > 1000
    assert rejected > 0  # the mutations really do hit the validators


def test_mutated_jsonrpc_payloads_raise_only_protocol_errors() -> None:
    for vector in DOC["jsonrpc"]:
        for mutated in mutations(vector["payload"]):
            only_protocol_errors(jsonrpc.classify, mutated)
            try:
                kind = jsonrpc.classify(mutated)
            except ProtocolError:
                continue
            if kind == jsonrpc.ERROR:
                assert isinstance(jsonrpc.error_message(mutated), str)
            if kind == jsonrpc.RESPONSE:
                only_protocol_errors(device_mcp.result_text, mutated["result"])


def test_junk_tools_and_cursors_raise_only_protocol_errors() -> None:
    tools = next(v["tools"] for v in DOC["paging"] if v["name"].startswith("everything fits"))
    for mutated in mutations(tools):
        only_protocol_errors(device_mcp.paginate, mutated, None)
    for cursor in JUNK:
        only_protocol_errors(device_mcp.paginate, tools, cursor)
    for junk in JUNK:
        only_protocol_errors(device_mcp.paginate, junk, None)
        only_protocol_errors(device_mcp.result_text, junk)


def test_every_truncation_of_a_binary_frame_is_a_protocol_error() -> None:
    for vector in DOC["binary"]:
        if "error" in vector or vector["version"] == 1:
            continue
        frame = bytes.fromhex(vector["hex"])
        for cut in range(len(frame)):
            try:
                audio.unpack(vector["version"], frame[:cut])
            except ProtocolError as err:
                assert err.field in ("header", "payload_size")
            else:
                raise AssertionError("accepted a frame cut to " + str(cut) + " bytes: " + vector["name"])


def test_junk_arguments_to_audio_functions_raise_only_protocol_errors() -> None:
    for junk in [*JUNK, b"", 7]:
        for version in (1, 2, 3, 0, None, "2"):
            only_protocol_errors(audio.unpack, version, junk)
            only_protocol_errors(audio.pack, version, junk)
            only_protocol_errors(audio.pack, version, b"abc", junk)
            only_protocol_errors(audio.pack_header_into, bytearray(20), version, junk)
