"""The device MCP dialect of JSON-RPC 2.0 (reference §4).

Quirks that are requirements: request ids are JSON integers (the device silently drops others);
the device's error object has a ``message`` and no ``code``; ``tools/list`` pages are capped at
about 8000 bytes and ``nextCursor`` (the name of the first tool left out) is absent on the last
page; tool results are text content with ``isError`` false.

MicroPython-compatible: only ``json``.
"""

from shared_protocol.errors import ProtocolError
from shared_protocol.messages import encode

REQUEST = "request"
NOTIFICATION = "notification"
RESPONSE = "response"
ERROR = "error"

MAX_PAGE_BYTES = 8000
# Room kept free in a page for the closing brackets and a ``"nextCursor":"..."`` entry, like the
# firmware does, so a full page plus its cursor still fits the MQTT payload limit.
_PAGE_RESERVE = 30
_PAGE_OPEN = len('{"tools":[')


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _check_id(msg_id):
    if not _is_int(msg_id):
        raise ProtocolError("must be an integer", "id")


def _check_params(params):
    if params is not None and not isinstance(params, dict):
        raise ProtocolError("must be an object", "params")


def request(id, method, params=None):  # noqa: A002 - JSON-RPC's own name
    _check_id(id)
    if not isinstance(method, str):
        raise ProtocolError("must be a string", "method")
    _check_params(params)
    msg = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method, params=None):
    if not isinstance(method, str):
        raise ProtocolError("must be a string", "method")
    _check_params(params)
    msg = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def result(id, result):  # noqa: A002
    _check_id(id)
    return {"jsonrpc": "2.0", "id": id, "result": result}


def error(id, message, code=None):  # noqa: A002
    """Error response in the device's shape: no ``code`` key unless one is given."""
    if id is not None:
        _check_id(id)
    if not isinstance(message, str):
        raise ProtocolError("must be a string", "error.message")
    err = {"message": message}
    if code is not None:
        if not _is_int(code):
            raise ProtocolError("must be an integer", "error.code")
        err["code"] = code
    return {"jsonrpc": "2.0", "id": id, "error": err}


def classify(payload):
    """Validate a JSON-RPC payload and say what it is: request, notification, response or error."""
    if not isinstance(payload, dict):
        raise ProtocolError("must be a JSON object", "payload")
    if payload.get("jsonrpc") != "2.0":
        raise ProtocolError('must be "2.0"', "jsonrpc")
    if "method" in payload:
        if not isinstance(payload["method"], str):
            raise ProtocolError("must be a string", "method")
        _check_params(payload.get("params"))
        if "id" not in payload:
            return NOTIFICATION
        _check_id(payload["id"])
        return REQUEST
    has_result = "result" in payload
    has_error = "error" in payload
    if has_result and has_error:
        raise ProtocolError("a response cannot carry both result and error", "result")
    if has_error:
        err = payload["error"]
        if not isinstance(err, dict):
            raise ProtocolError("must be an object", "error")
        if not isinstance(err.get("message"), str):
            raise ProtocolError("must be a string", "error.message")
        if "code" in err and not _is_int(err["code"]):
            raise ProtocolError("must be an integer", "error.code")
        # JSON-RPC allows a null id on errors about unparseable requests.
        if "id" not in payload:
            raise ProtocolError("is required", "id")
        if payload["id"] is not None:
            _check_id(payload["id"])
        return ERROR
    if not has_result:
        raise ProtocolError("needs a method, a result or an error", None)
    if "id" not in payload:
        raise ProtocolError("is required", "id")
    _check_id(payload["id"])
    return RESPONSE


def error_message(payload):
    """The message of an error response (``code`` may well be missing)."""
    if classify(payload) != ERROR:
        raise ProtocolError("is not an error response", "error")
    return payload["error"]["message"]


def error_code(payload):
    """The code of an error response, or None when the device left it out (it always does)."""
    if classify(payload) != ERROR:
        raise ProtocolError("is not an error response", "error")
    return payload["error"].get("code")


# ---- tool helpers -------------------------------------------------------------------------------


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
    if _is_int(value):
        return str(value)
    return encode(value) if isinstance(value, dict) else _encode_any(value)


def _encode_any(value):
    # encode() only takes dicts; wrap and strip to serialise lists/floats/None the same way.
    text = encode({"v": value})
    return text[5:-1]


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


def _size(obj):
    # Bytes on the wire, independent of key order (MicroPython dicts are unordered).
    return len(encode(obj).encode("utf-8"))


def paginate(tools, cursor, max_bytes=MAX_PAGE_BYTES, with_user_tools=True):
    """One tools/list page: ``(page, next_cursor)``, built exactly like the firmware builds it.

    ``cursor`` is None/"" for the first page, otherwise the name of the first tool of the page.
    Tools are added in order while ``10 + 30 + sum(tool bytes + 1)`` stays within ``max_bytes``
    (the firmware's ``{"tools":[`` prefix, a 30-byte reserve for the tail and ``nextCursor``,
    one comma per tool); ``next_cursor`` names the first tool left out, None on the last page.
    A tool too large for an empty page raises the device's own error message. With
    ``with_user_tools`` false, tools annotated ``audience: ["user"]`` are skipped.
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
        if not with_user_tools and _user_only(tools[i]):
            continue
        cost = _size(tools[i]) + 1  # + the separating comma
        if used + cost > max_bytes:
            if not page:
                raise ProtocolError("Failed to add tool " + name + " because of payload size limit")
            return page, name
        used += cost
        page.append(tools[i])
    return page, None


def _user_only(tool):
    annotations = tool.get("annotations")
    return isinstance(annotations, dict) and annotations.get("audience") == ["user"]


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
