"""The device MCP dialect (reference §4), written once for both ends.

The device is the MCP *server*; JSON-RPC 2.0 payloads travel in ``{"type":"mcp","payload":...}``.
Device side: ``Server`` (subclassed by the firmware and by the test devices) answers ``initialize``,
paged ``tools/list`` and ``tools/call`` exactly like ``mcp_server.cc``; the helpers below it bind
arguments and shape replies. The client (the Wren server's ``wren.tools.device_mcp``) uses the same
names, ``is_user_only`` and ``result_text``.

Quirks that are requirements: integer request ids only, anything else is dropped without a reply
(``jsonrpc.classify``); notifications are ignored; errors are ``{"message": ...}`` without ``code``,
with the firmware's exact texts; ``tools/list`` pages stay under about 8000 bytes, ``nextCursor`` is
the name of the first tool left out and is absent on the last page; a tool result is one text item
with ``isError`` false, and a failing tool gives an error reply instead.

MicroPython-safe: no typing or dataclasses, no dict-order assumptions; besides shared_protocol only
``json``, ``sys`` and ``io`` (the byte-counting sink of the page rule).
"""

import io
import json
import sys

from shared_protocol import jsonrpc
from shared_protocol.errors import ProtocolError
from shared_protocol.messages import encode

_MICROPYTHON = sys.implementation.name == "micropython"

PROTOCOL_VERSION = "2024-11-05"
INITIALIZE = "initialize"
TOOLS_LIST = "tools/list"
TOOLS_CALL = "tools/call"
NOTIFICATIONS = "notifications"  # the prefix of every notification method; the device ignores them
INITIALIZED = "notifications/initialized"

MAX_PAGE_BYTES = 8000
# Room kept free in a page for the closing brackets and a ``"nextCursor":"..."`` entry, like the
# firmware does, so a full page plus its cursor still fits the MQTT payload limit.
_PAGE_RESERVE = 30
_PAGE_OPEN = len('{"tools":[')

# The firmware's error texts (§4.5), word for word; the last five are followed by a name or number.
MISSING_PARAMS = "Missing params"
MISSING_NAME = "Missing name"
INVALID_ARGUMENTS = "Invalid arguments"
UNKNOWN_TOOL = "Unknown tool: "
MISSING_ARGUMENT = "Missing valid argument: "
BELOW_MINIMUM = "Value is below minimum allowed: "
ABOVE_MAXIMUM = "Value exceeds maximum allowed: "
NOT_IMPLEMENTED = "Method not implemented: "


class CallError(Exception):
    """A request the device answers with an error reply; ``str(err)`` is the message."""


# ---- device side --------------------------------------------------------------------------------


class Server:
    """The device's MCP server. Subclasses provide ``describe_tools()`` (descriptors, in their fixed
    order: common tools first) and ``call_tool(name, arguments)`` (the value, rendered as text by
    ``to_text``; raise ``CallError`` with a device error text). ``handle(payload)`` gives the reply
    payload, or None when the device stays silent."""

    max_page_bytes = MAX_PAGE_BYTES

    def __init__(self, name, version):
        self.name = name
        self.version = version
        self.vision = None  # capabilities.vision {url, token} from the last initialize (§4.3)

    def describe_tools(self):
        raise NotImplementedError

    def call_tool(self, name, arguments):
        # ``arguments`` is a dict, or None when the request had none.
        raise NotImplementedError

    def on_request(self, msg_id, method, params):
        pass  # a hook for logging: called for every request that gets a reply

    def on_dropped(self, why):
        pass  # a hook for logging: a payload that gets no reply (bad id, a response, not JSON-RPC 2.0)

    def handle(self, payload):
        try:
            kind = jsonrpc.classify(payload)
        except ProtocolError as e:  # string/float/missing id, params not an object, not 2.0 ...
            self.on_dropped(str(e))
            return None
        if kind != jsonrpc.REQUEST:
            if kind != jsonrpc.NOTIFICATION:
                self.on_dropped("a " + kind + " sent to the device")
            return None
        method = payload["method"]
        if method.startswith(NOTIFICATIONS):
            return None
        msg_id = payload["id"]
        params = payload.get("params")
        self.on_request(msg_id, method, params)
        try:
            if method == INITIALIZE:
                # The device reads only capabilities.vision.url/.token, for a camera tool (§4.3).
                caps = (params or {}).get("capabilities")
                vision = caps.get("vision") if isinstance(caps, dict) else None
                if isinstance(vision, dict):
                    self.vision = {"url": vision.get("url"), "token": vision.get("token")}
                return jsonrpc.result(msg_id, initialize_result(self.name, self.version))
            if method == TOOLS_LIST:
                return jsonrpc.result(msg_id, list_page(self.describe_tools(), params, self.max_page_bytes))
            if method == TOOLS_CALL:
                name, arguments = call_target(params)
                return jsonrpc.result(msg_id, text_content(to_text(self.call_tool(name, arguments))))
            return jsonrpc.error(msg_id, NOT_IMPLEMENTED + method)
        except CallError as e:
            return jsonrpc.error(msg_id, str(e))
        except ProtocolError as e:
            return jsonrpc.error(msg_id, e.problem)
        except Exception as e:  # a failing tool is an error reply, never a crash (§4.5)
            return jsonrpc.error(msg_id, str(e) or repr(e))


def initialize_result(name, version):
    """The device's ``initialize`` result: its board name and firmware version (§4.3)."""
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": name, "version": version},
    }


def list_page(tools, params=None, max_bytes=MAX_PAGE_BYTES):
    """The ``tools/list`` result for request ``params`` (``cursor``, ``withUserTools``; §4.4)."""
    params = params or {}
    cursor = params.get("cursor")
    with_user = params.get("withUserTools") is True
    page, next_cursor = paginate(tools, cursor if isinstance(cursor, str) else "", max_bytes, with_user)
    return tools_list_result(page, next_cursor)


def call_target(params):
    """``(name, arguments)`` of a ``tools/call``; ``arguments`` is None when absent (§4.5)."""
    if not isinstance(params, dict):
        raise CallError(MISSING_PARAMS)
    name = params.get("name")
    if not isinstance(name, str):
        raise CallError(MISSING_NAME)
    arguments = params.get("arguments")
    if "arguments" in params and not isinstance(arguments, dict):  # JSON null counts as present
        raise CallError(INVALID_ARGUMENTS)
    return name, arguments


def bind(name, schema, arguments):
    """The value of property ``name`` with ``schema`` (``type`` boolean/integer/string, optional
    ``default``, ``minimum``, ``maximum``) from ``arguments`` (a dict or None), as the device binds it:
    a value counts only if its JSON type matches (numbers are truncated to integers), a wrong or
    missing one takes the default or fails, integers are range-checked."""
    value = arguments.get(name) if arguments is not None else None
    kind = schema.get("type")
    if kind == "integer":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            value = int(value)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, str)
    if not ok:
        if "default" not in schema:
            raise CallError(MISSING_ARGUMENT + name)
        return schema["default"]
    if kind == "integer":
        minimum = schema.get("minimum")
        maximum = schema.get("maximum")
        if minimum is not None and value < minimum:
            raise CallError(BELOW_MINIMUM + str(minimum))
        if maximum is not None and value > maximum:
            raise CallError(ABOVE_MAXIMUM + str(maximum))
    return value


def text_content(text, is_error=False):
    """A tools/call result carrying one text item, the only shape the device produces."""
    if not isinstance(text, str):
        raise ProtocolError("must be a string", "content.text")
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def to_text(value):
    """Tool return value as the device renders it: bools as true/false, numbers, JSON for objects."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    return encode(value) if isinstance(value, dict) else _encode_any(value)


def _encode_any(value):
    # encode() only takes dicts; wrap and strip to serialise lists/floats/None the same way.
    text = encode({"v": value})
    return text[5:-1]


class _ByteCounter(io.IOBase):
    # A json.dump target that only counts UTF-8 bytes (a stream: MicroPython's json.dump needs one).
    def __init__(self):
        self.n = 0

    def write(self, chunk):
        self.n += len(chunk) if _MICROPYTHON else len(chunk.encode("utf-8"))  # MicroPython hands bytes
        return len(chunk)


def _size(obj):
    # Bytes of the compact JSON on the wire, independent of key order (MicroPython dicts are unordered),
    # counted while json.dump writes it: no copy of the text is made (a tool may be ~8 KB, and
    # encode() + .encode() would need two such blocks on the device heap at once).
    counter = _ByteCounter()
    try:
        if _MICROPYTHON:
            json.dump(obj, counter, separators=(",", ":"))
        else:
            json.dump(obj, counter, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as err:
        raise ProtocolError("is not JSON-serialisable: " + str(err), "tools")
    return counter.n


def paginate(tools, cursor, max_bytes=MAX_PAGE_BYTES, with_user_tools=True):
    """One tools/list page: ``(page, next_cursor)``, built exactly like the firmware builds it.

    ``cursor`` is None/"" for the first page, otherwise the name of the first tool of the page.
    Tools are added in order while ``10 + 30 + sum(tool bytes + 1)`` stays within ``max_bytes``
    (the firmware's ``{"tools":[`` prefix, a 30-byte reserve for the tail and ``nextCursor``,
    one comma per tool); ``next_cursor`` names the first tool left out, None on the last page.
    A tool too large for an empty page raises the device's own error message. With
    ``with_user_tools`` false, user-only tools (``is_user_only``) are skipped.
    """
    if not isinstance(tools, list):
        raise ProtocolError("must be a list", "tools")
    if cursor is not None and not isinstance(cursor, str):
        raise ProtocolError("must be a string", "cursor")
    start = 0
    if cursor:
        start = -1
        for i in range(len(tools)):
            if _tool_name(tools[i], i) == cursor:
                start = i
                break
        if start < 0:
            # The firmware answers "Failed to add tool  because..." here; naming the cursor is clearer.
            raise ProtocolError("no tool named " + repr(cursor), "cursor")
    used = _PAGE_OPEN + _PAGE_RESERVE
    page = []
    for i in range(start, len(tools)):
        name = _tool_name(tools[i], i)
        if not with_user_tools and is_user_only(tools[i]):
            continue
        cost = _size(tools[i]) + 1  # + the separating comma
        if used + cost > max_bytes:
            if not page:
                raise ProtocolError("Failed to add tool " + name + " because of payload size limit")
            return page, name
        used += cost
        page.append(tools[i])
    return page, None


def is_user_only(tool):
    """A tool for companion apps, not the assistant: ``annotations.audience`` names the user only."""
    annotations = tool.get("annotations")
    audience = annotations.get("audience") if isinstance(annotations, dict) else None
    return isinstance(audience, list) and "user" in audience and "assistant" not in audience


def _tool_name(tool, index):
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise ProtocolError("must be an object with a string name", "tools." + str(index))
    return tool["name"]


def tools_list_result(page, next_cursor=None):
    """The ``result`` of a tools/list response; no ``nextCursor`` key on the last page."""
    res = {"tools": page}
    if next_cursor is not None:
        res["nextCursor"] = next_cursor
    return res


# ---- client side (the Wren server) --------------------------------------------------------------


def result_text(result):
    """The text of the first text item of a tools/call result."""
    if not isinstance(result, dict):
        raise ProtocolError("must be an object", "result")
    content = result.get("content")
    if not isinstance(content, list):
        raise ProtocolError("must be a list", "result.content")
    for i in range(len(content)):
        item = content[i]
        if isinstance(item, dict) and item.get("type") == "text":
            text = item.get("text")
            if not isinstance(text, str):
                raise ProtocolError("must be a string", "result.content." + str(i) + ".text")
            return text
    raise ProtocolError("has no text item", "result.content")
