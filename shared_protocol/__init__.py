"""Every frame Wren's firmware and server exchange (the xiaozhi protocol).

Importable unchanged on CPython 3.11+ and MicroPython; no I/O. See docs/protocol.md.
"""

from shared_protocol import audio, constants, device_mcp, jsonrpc, messages, validation
from shared_protocol.errors import ProtocolError, UnknownMessageType
from shared_protocol.validation import PROTOCOL_VERSIONS

__all__ = [
    "PROTOCOL_VERSIONS",
    "ProtocolError",
    "UnknownMessageType",
    "audio",
    "constants",
    "device_mcp",
    "jsonrpc",
    "messages",
    "validation",
]
