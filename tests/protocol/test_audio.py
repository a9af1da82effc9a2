"""Binary audio framing v1/v2/v3."""

import os

import pytest

from shared_protocol import ProtocolError, audio


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("size", [0, 1, 120, 4000])
def test_pack_then_unpack_gives_the_payload_back(version: int, size: int) -> None:
    payload = os.urandom(size)
    frame = audio.pack(version, payload, 1234)
    assert len(frame) == audio.header_size(version) + size
    expected_timestamp = 1234 if version == 2 else 0  # only v2 carries a timestamp
    assert audio.unpack(version, frame) == (payload, expected_timestamp)


def test_header_sizes() -> None:
    assert [audio.header_size(v) for v in (1, 2, 3)] == [0, 16, 4]
    for bad in (4, 0, True, "2", None):
        with pytest.raises(ProtocolError) as caught:
            audio.header_size(bad)
        assert caught.value.field == "version"


def test_pack_header_into_writes_in_place_for_a_payload_already_in_the_buffer() -> None:
    payload = b"opus-bytes"
    buf = bytearray(16 + 64)
    buf[16 : 16 + len(payload)] = payload
    written = audio.pack_header_into(buf, 2, len(payload), 99)
    assert written == 16
    frame = bytes(memoryview(buf)[: written + len(payload)])
    assert audio.unpack(2, frame) == (payload, 99)
    assert audio.pack_header_into(bytearray(10), 1, 10) == 0


def test_parse_header_points_into_the_frame_without_copying() -> None:
    frame = memoryview(audio.pack(3, b"hello"))
    offset, length, timestamp = audio.parse_header(3, frame)
    assert (offset, length, timestamp) == (4, 5, 0)
    assert bytes(frame[offset : offset + length]) == b"hello"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: audio.pack(3, b"x" * 65536), "payload_size"),
        (lambda: audio.pack(2, b"x", -1), "timestamp"),
        (lambda: audio.pack(2, b"x", 2**32), "timestamp"),
        (lambda: audio.pack(2, b"x", True), "timestamp"),
        (lambda: audio.pack(2, "text"), "payload"),
        (lambda: audio.pack_header_into(bytearray(10), 2, 5), "payload_size"),
        (lambda: audio.pack_header_into(bytearray(10), 3, -1), "payload_size"),
        (lambda: audio.unpack(2, b"\x00" * 15), "header"),
        (lambda: audio.unpack(3, b"\x00\x00\x00\x05abcd"), "payload_size"),
        (lambda: audio.unpack(3, b"\x00\x00\x00\x01ab"), "payload_size"),
    ],
)
def test_bad_frames_and_arguments_name_the_field(call, field: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        call()
    assert caught.value.field == field
    assert str(caught.value).startswith(field + ": ")


def test_largest_v3_payload_fits() -> None:
    payload = b"\x01" * 65535
    assert audio.unpack(3, audio.pack(3, payload)) == (payload, 0)
