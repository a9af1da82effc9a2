"""Binary audio frames: protocol versions 1, 2 and 3 (reference §2).

v1: the frame is the raw payload (one Opus packet, or a PCM chunk), no header.
v2: 16-byte big-endian header ``version:u16 type:u16 reserved:u32 timestamp:u32 payload_size:u32``.
v3: 4-byte header ``type:u8 reserved:u8 payload_size:u16 (BE)``.

The header ``version``/``type``/``reserved`` fields are ignored on receive, as the device does.
The declared ``payload_size`` must match the bytes actually present: a shorter frame is truncated,
a longer one has trailing garbage; both raise ProtocolError.

``pack_header_into`` and ``parse_header`` exist for the firmware's zero-copy audio loop:
the first writes into a caller-owned buffer and allocates nothing; the second returns
``(offset, length, timestamp)`` so the caller can slice a memoryview instead of copying.
"""

import struct

from shared_protocol.errors import ProtocolError

_V2 = ">HHIII"
_V3 = ">BBH"
_V2_SIZE = 16
_V3_SIZE = 4
_TYPE_AUDIO = 0
MAX_V3_PAYLOAD = 0xFFFF
MAX_TIMESTAMP = 0xFFFFFFFF


def header_size(version):
    """Bytes of header in front of the payload for this protocol version."""
    if isinstance(version, bool):  # True == 1 in CPython; never a version
        version = repr(version)
    if version == 1:
        return 0
    if version == 2:
        return _V2_SIZE
    if version == 3:
        return _V3_SIZE
    raise ProtocolError("must be 1, 2 or 3 (got " + repr(version) + ")", "version")


def _check_int(value, field):
    if not isinstance(value, int) or isinstance(value, bool):
        raise ProtocolError("must be an integer", field)


def pack_header_into(buf, version, payload_len, timestamp=0):
    """Write the header for a payload already placed at ``buf[header_size(version):]``.

    Returns the header size. Allocates nothing (safe under ``micropython.heap_lock()``) for
    timestamps that fit a small int.
    """
    size = header_size(version)
    _check_int(payload_len, "payload_size")
    if payload_len < 0:
        raise ProtocolError("must not be negative", "payload_size")
    if len(buf) < size + payload_len:
        raise ProtocolError("buffer too small for header and payload", "payload_size")
    if version == 2:
        _check_int(timestamp, "timestamp")
        if timestamp < 0 or timestamp > MAX_TIMESTAMP:
            raise ProtocolError("must fit in 32 bits", "timestamp")
        if payload_len > MAX_TIMESTAMP:
            raise ProtocolError("must fit in 32 bits", "payload_size")
        struct.pack_into(_V2, buf, 0, 2, _TYPE_AUDIO, 0, timestamp, payload_len)
    elif version == 3:
        if payload_len > MAX_V3_PAYLOAD:
            raise ProtocolError("too large for a v3 frame (max 65535)", "payload_size")
        struct.pack_into(_V3, buf, 0, _TYPE_AUDIO, 0, payload_len)
    return size


def pack(version, payload, timestamp=0):
    """One binary frame carrying ``payload``. ``timestamp`` is only carried by v2."""
    size = header_size(version)
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise ProtocolError("must be bytes", "payload")
    n = len(payload)
    if size == 0:
        return bytes(payload)
    frame = bytearray(size + n)
    pack_header_into(frame, version, n, timestamp)
    frame[size:] = payload
    return bytes(frame)


def parse_header(version, data):
    """``(offset, length, timestamp)`` of the payload inside frame ``data``, without copying."""
    size = header_size(version)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProtocolError("frame must be bytes", None)
    total = len(data)
    if version == 1:
        return 0, total, 0
    if total < size:
        raise ProtocolError(
            "frame of "
            + str(total)
            + " bytes is shorter than the "
            + str(size)
            + "-byte v"
            + str(version)
            + " header",
            "header",
        )
    if version == 2:
        fields = struct.unpack_from(_V2, data, 0)
        timestamp = fields[3]
        declared = fields[4]
    else:
        declared = struct.unpack_from(_V3, data, 0)[2]
        timestamp = 0
    actual = total - size
    if declared > actual:
        raise ProtocolError(
            "declares " + str(declared) + " bytes but only " + str(actual) + " follow (truncated)",
            "payload_size",
        )
    if declared < actual:
        raise ProtocolError(
            "declares " + str(declared) + " bytes but " + str(actual) + " follow (oversize)",
            "payload_size",
        )
    return size, declared, timestamp


def unpack(version, data):
    """``(payload, timestamp)`` of one binary frame; payload is a fresh ``bytes``."""
    offset, length, timestamp = parse_header(version, data)
    return bytes(data[offset : offset + length]), timestamp
