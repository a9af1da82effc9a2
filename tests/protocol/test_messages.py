"""Constructors, encode/parse round trips and error reporting of shared_protocol.messages."""

import json

import pytest

from shared_protocol import PROTOCOL_VERSIONS, ProtocolError, UnknownMessageType, messages

SID = "3f1c7c1e-1d0a-4a7e-9d38-2b1f3c1d9e55"


def all_constructed() -> list[dict]:
    return [
        messages.hello_device(),
        messages.hello_device(version=3, features={"mcp": True, "aec": True}, transport="udp"),
        messages.hello_server(SID, messages.audio_params(sample_rate=24000)),
        messages.hello_server(SID, messages.audio_params("pcm", 16000, 1, 20)),
        messages.listen_start(SID, "auto"),
        messages.listen_start(SID, "manual"),
        messages.listen_start(None, "realtime"),
        messages.listen_stop(SID),
        messages.listen_detect(SID, "你好小智"),
        messages.abort(SID),
        messages.abort(SID, "wake_word_detected"),
        messages.stt(SID, "what the user said"),
        messages.llm(SID, "happy", "😊"),
        messages.llm(SID, "thinking"),
        messages.tts_start(SID),
        messages.tts_sentence_start(SID, "Hello there."),
        messages.tts_stop(SID),
        messages.mcp({"jsonrpc": "2.0", "id": 1, "method": "initialize"}),
        messages.mcp({"jsonrpc": "2.0", "id": 1, "result": {}}, SID),
        messages.system(SID, "reboot"),
        messages.alert(SID, "Warning", "Battery low", "sad"),
        messages.goodbye(SID),
        messages.ping(),
        messages.pong("2026-11-30 06:00:00"),
    ]


@pytest.mark.parametrize("msg", all_constructed(), ids=lambda m: m["type"] + ":" + str(m.get("state", "")))
def test_constructed_message_survives_encode_and_parse(msg: dict) -> None:
    text = messages.encode(msg)
    assert messages.parse(text) == msg
    assert messages.parse(text.encode("utf-8")) == msg


def test_constructors_produce_the_reference_shapes() -> None:
    assert messages.hello_server(SID, messages.audio_params(sample_rate=24000)) == {
        "type": "hello",
        "transport": "websocket",
        "session_id": SID,
        "audio_params": {"format": "opus", "sample_rate": 24000, "channels": 1, "frame_duration": 60},
    }
    assert messages.hello_device() == {
        "type": "hello",
        "version": 1,
        "features": {"mcp": True},
        "transport": "websocket",
        "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1, "frame_duration": 60},
    }
    assert messages.listen_start(SID, "auto") == {
        "session_id": SID,
        "type": "listen",
        "state": "start",
        "mode": "auto",
    }
    assert messages.abort(SID) == {"session_id": SID, "type": "abort"}
    assert messages.llm(SID, "happy") == {"session_id": SID, "type": "llm", "emotion": "happy"}
    assert messages.mcp({"jsonrpc": "2.0"}) == {"type": "mcp", "payload": {"jsonrpc": "2.0"}}
    assert messages.tts_stop(SID) == {"session_id": SID, "type": "tts", "state": "stop"}
    assert messages.ping() == {"type": "ping"}


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: messages.audio_params(sample_rate=44100), "audio_params.sample_rate"),
        (lambda: messages.audio_params(frame_duration=30), "audio_params.frame_duration"),
        (lambda: messages.audio_params(format="mp3"), "audio_params.format"),
        (lambda: messages.audio_params(channels=2), "audio_params.channels"),
        (lambda: messages.audio_params(sample_rate=True), "audio_params.sample_rate"),
        (lambda: messages.hello_device(version=4), "version"),
        (lambda: messages.hello_device(features={"mcp": 1}), "features.mcp"),
        (lambda: messages.hello_server(SID, {"sample_rate": 22050}), "audio_params.sample_rate"),
        (lambda: messages.hello_server(SID, messages.audio_params(), transport=None), "transport"),
        (lambda: messages.hello_server("", messages.audio_params()), "session_id"),
        (lambda: messages.hello_server('a"b', messages.audio_params()), "session_id"),
        (lambda: messages.hello_server("sess-é", messages.audio_params()), "session_id"),
        (lambda: messages.listen_start(SID, "push"), "mode"),
        (lambda: messages.listen_detect(SID, None), "text"),
        (lambda: messages.abort(SID, 5), "reason"),
        (lambda: messages.stt(SID, b"bytes"), "text"),
        (lambda: messages.llm(SID, None), "emotion"),
        (lambda: messages.tts_sentence_start(SID, None), "text"),
        (lambda: messages.mcp("not an object"), "payload"),
        (lambda: messages.system(SID, 1), "command"),
        (lambda: messages.alert(SID, "Warning", 5, "sad"), "message"),
        (lambda: messages.pong(True), "timestamp"),
        (lambda: messages.listen_stop(42), "session_id"),
    ],
)
def test_constructor_rejects_bad_values_naming_the_field(build, field: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        build()
    assert caught.value.field == field
    assert str(caught.value).startswith(field + ": ")
    assert caught.value.problem in str(caught.value)


def test_error_message_says_what_is_allowed() -> None:
    with pytest.raises(ProtocolError) as caught:
        messages.parse('{"type":"hello","transport":"websocket","audio_params":{"sample_rate":44100}}')
    assert str(caught.value) == (
        "audio_params.sample_rate: must be one of 8000, 12000, 16000, 24000, 48000 (got 44100)"
    )


def test_protocol_error_is_a_value_error_and_unknown_type_is_a_protocol_error() -> None:
    with pytest.raises(UnknownMessageType) as caught:
        messages.parse('{"type":"server","session_id":5}')
    assert caught.value.type == "server"
    assert caught.value.field == "type"
    assert isinstance(caught.value, ProtocolError)
    assert isinstance(caught.value, ValueError)
    assert "server" in str(caught.value)


def test_parse_keeps_unknown_fields_and_returns_the_given_dict() -> None:
    msg = {"type": "stt", "text": "hi", "session_id": SID, "x_future": {"a": 1}}
    assert messages.parse(msg) is msg
    assert messages.parse(json.dumps(msg))["x_future"] == {"a": 1}


@pytest.mark.parametrize(
    "data", [b'{"type":"ping"}', bytearray(b'{"type":"ping"}'), memoryview(b'{"type":"ping"}')]
)
def test_parse_accepts_binary_text(data) -> None:
    assert messages.parse(data) == {"type": "ping"}


@pytest.mark.parametrize("data", [None, 42, ["type"], 1.5])
def test_parse_rejects_non_frames_as_a_whole(data) -> None:
    with pytest.raises(ProtocolError) as caught:
        messages.parse(data)
    assert caught.value.field is None


def test_encode_is_compact_utf8_json() -> None:
    text = messages.encode(messages.stt(SID, "héllo 你好"))
    assert " " not in text.replace("héllo 你好", "")
    assert "héllo 你好" in text
    assert json.loads(text)["text"] == "héllo 你好"


def test_encode_reports_unserialisable_values() -> None:
    with pytest.raises(ProtocolError):
        messages.encode({"type": "stt", "text": object()})
    with pytest.raises(ProtocolError):
        messages.encode(["not", "a", "dict"])


def test_downlink_audio_falls_back_to_the_device_defaults() -> None:
    assert messages.downlink_audio({"type": "hello", "transport": "websocket"}) == (24000, 60)
    hello = messages.hello_server(SID, messages.audio_params(sample_rate=16000, frame_duration=20))
    assert messages.downlink_audio(hello) == (16000, 20)


def test_protocol_versions_are_the_three_binary_framings() -> None:
    assert PROTOCOL_VERSIONS == (1, 2, 3)
