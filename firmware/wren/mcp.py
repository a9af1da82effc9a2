# The device MCP server (reference §4.2-§4.6): JSON-RPC requests arrive in {"type":"mcp"} envelopes.
# Integer ids only (anything else is dropped without a reply), notifications ignored, errors without a
# code, tools/list paged at ~8000 bytes with nextCursor = the first tool left out (absent at the end).
from shared_protocol import ProtocolError, jsonrpc
from wren.log import log

_NO_DEFAULT = object()
_TYPES = ("boolean", "integer", "string")


class Prop:
    def __init__(self, name, kind, default=_NO_DEFAULT, minimum=None, maximum=None):
        if kind not in _TYPES:
            raise ValueError("property type must be boolean, integer or string")
        self.name = name
        self.kind = kind
        self.default = default
        self.minimum = minimum
        self.maximum = maximum

    def schema(self):
        s = {"type": self.kind}
        if self.default is not _NO_DEFAULT:
            s["default"] = self.default
        if self.minimum is not None:
            s["minimum"] = self.minimum
        if self.maximum is not None:
            s["maximum"] = self.maximum
        return s

    def bind(self, arguments):
        # §4.5: a value counts only if its JSON type matches; a wrong type counts as missing.
        value = arguments.get(self.name) if arguments is not None else None
        if self.kind == "integer":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok:
                value = int(value)
        elif self.kind == "boolean":
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, str)
        if not ok:
            if self.default is _NO_DEFAULT:
                raise ToolError("Missing valid argument: " + self.name)
            return self.default
        if self.kind == "integer":
            if self.minimum is not None and value < self.minimum:
                raise ToolError("Value is below minimum allowed: %d" % self.minimum)
            if self.maximum is not None and value > self.maximum:
                raise ToolError("Value exceeds maximum allowed: %d" % self.maximum)
        return value


class ToolError(Exception):
    pass


class Tool:
    def __init__(self, name, description, props, fn, user_only=False):
        self.name = name
        self.description = description
        self.props = props
        self.fn = fn
        self.user_only = user_only

    def describe(self):
        properties = {}
        required = []
        for p in self.props:
            properties[p.name] = p.schema()
            if p.default is _NO_DEFAULT:
                required.append(p.name)
        schema = {"type": "object", "properties": properties}
        if required:
            schema["required"] = required
        d = {"name": self.name, "description": self.description, "inputSchema": schema}
        if self.user_only:
            d["annotations"] = {"audience": ["user"]}
        return d


class McpServer:
    def __init__(self, name, version):
        self.name = name
        self.version = version
        self.tools = []
        self.vision = None

    def add_tool(self, name, description, props, fn, user_only=False):
        # Order is fixed and kept: common tools first, then board tools (§4.4).
        self.tools.append(Tool(name, description, props, fn, user_only))

    def handle(self, payload):
        # -> reply payload (dict) or None when the message gets no reply.
        try:
            kind = jsonrpc.classify(payload)
        except ProtocolError as e:
            log("mcp", "dropped:", e)  # string/float id, params not an object, not JSON-RPC 2.0 ...
            return None
        if kind != jsonrpc.REQUEST:
            if kind != jsonrpc.NOTIFICATION:
                log("mcp", "dropped a", kind, "sent to the device")
            return None
        method = payload["method"]
        msg_id = payload["id"]
        params = payload.get("params")
        if method.startswith("notifications"):
            return None
        log("mcp", method, "id", msg_id, (params or {}).get("cursor") or "" if method == "tools/list" else
            (params or {}).get("name") or "")
        try:
            if method == "initialize":
                return jsonrpc.result(msg_id, self._initialize(params))
            if method == "tools/list":
                return jsonrpc.result(msg_id, self._list(params))
            if method == "tools/call":
                return jsonrpc.result(msg_id, self._call(params))
            return jsonrpc.error(msg_id, "Method not implemented: " + method)
        except ToolError as e:
            return jsonrpc.error(msg_id, str(e))
        except ProtocolError as e:
            return jsonrpc.error(msg_id, e.problem)
        except Exception as e:  # a failing tool is an error reply, never a crash (§4.5)
            log("mcp", "tool failed:", repr(e))
            return jsonrpc.error(msg_id, str(e) or repr(e))

    def _initialize(self, params):
        caps = (params or {}).get("capabilities")
        vision = caps.get("vision") if isinstance(caps, dict) else None
        if isinstance(vision, dict):
            self.vision = {"url": vision.get("url"), "token": vision.get("token")}
        return {
            "protocolVersion": "2024-11-05",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": self.name, "version": self.version},
        }

    def _list(self, params):
        params = params or {}
        cursor = params.get("cursor")
        with_user = params.get("withUserTools") is True
        listed = [t.describe() for t in self.tools if with_user or not t.user_only]
        page, next_cursor = jsonrpc.paginate(listed, cursor if isinstance(cursor, str) else "")
        return jsonrpc.tools_list_result(page, next_cursor)

    def _call(self, params):
        if not isinstance(params, dict):
            raise ToolError("Missing params")
        name = params.get("name")
        if not isinstance(name, str):
            raise ToolError("Missing name")
        arguments = params.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise ToolError("Invalid arguments")
        tool = None
        for t in self.tools:
            if t.name == name:
                tool = t
                break
        if tool is None:
            raise ToolError("Unknown tool: " + name)
        values = [p.bind(arguments) for p in tool.props]
        return jsonrpc.text_content(jsonrpc.to_text(tool.fn(*values)))
