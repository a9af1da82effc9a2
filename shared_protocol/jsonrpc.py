"""JSON-RPC 2.0 as the xiaozhi device speaks it (reference §4.2); the MCP methods on top of it are
in ``device_mcp``.

Quirks that are requirements: request ids are JSON integers (the device silently drops others);
the device's error object has a ``message`` and no ``code``.

MicroPython-compatible: plain dicts only.
"""

from shared_protocol.errors import ProtocolError

REQUEST = "request"
NOTIFICATION = "notification"
RESPONSE = "response"
ERROR = "error"


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
