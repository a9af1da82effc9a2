# The device MCP server (reference §4.2-§4.6): the dialect itself (dropped ids, error texts, paging,
# argument binding, result shape) is shared_protocol.device_mcp; this adds the tool registry of the
# firmware (Prop/Tool, in registration order) and its log lines.
from shared_protocol import device_mcp
from wren_device.log import log

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


class McpServer(device_mcp.Server):
    def __init__(self, name, version):
        super().__init__(name, version)
        self.tools = []

    def add_tool(self, name, description, props, fn, user_only=False):
        # Order is fixed and kept: common tools first, then board tools (§4.4).
        self.tools.append(Tool(name, description, props, fn, user_only))

    def describe_tools(self):
        return [t.describe() for t in self.tools]

    def call_tool(self, name, arguments):
        for tool in self.tools:
            if tool.name == name:
                break
        else:
            raise device_mcp.CallError(device_mcp.UNKNOWN_TOOL + name)
        # Properties are bound in declaration order, so the first bad one names the error (§4.5).
        values = [device_mcp.bind(p.name, p.schema(), arguments) for p in tool.props]
        try:
            return tool.fn(*values)
        except Exception as e:
            log("mcp", "tool failed:", repr(e))
            raise

    def on_request(self, msg_id, method, params):
        params = params or {}
        log("mcp", method, "id", msg_id,
            (params.get("cursor") or "") if method == device_mcp.TOOLS_LIST else (params.get("name") or ""))

    def on_dropped(self, why):
        log("mcp", "dropped:", why)
