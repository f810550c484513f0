"""The remoting frame codec: layout, round trips, every kind of bad input, fuzzing."""

from __future__ import annotations

import contextlib
import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triomq.errors import TriomqError
from triomq.protocol.remoting import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    FrameDecoder,
    FrameError,
    RemotingCommand,
    encode,
    encode_into,
)


def frame(header: bytes, body: bytes = b"", *, serialize_type: int = 0,
          length: int | None = None, header_length: int | None = None) -> bytes:
    """A hand-built frame, so tests can get any field wrong."""
    if length is None:
        length = 4 + len(header) + len(body)
    if header_length is None:
        header_length = len(header)
    return (struct.pack(">iI", length, (serialize_type << 24) | header_length)
            + header + body)


def decode_all(data: bytes, max_frame_size: int = 1 << 20) -> list[RemotingCommand]:
    decoder = FrameDecoder(max_frame_size)
    decoder.feed(data)
    commands = list(decoder)
    decoder.feed_eof()
    return commands


def test_layout_matches_rocketmq() -> None:
    command = RemotingCommand(code=1002, opaque=7, ext_fields={"brokerName": "a"},
                              body=b"payload")
    data = encode(command)
    length, header_word = struct.unpack_from(">iI", data)
    assert length == len(data) - 4
    assert header_word >> 24 == 0  # JSON
    header = json.loads(data[8:8 + (header_word & 0xFFFFFF)])
    assert header == {"code": 1002, "language": "PYTHON", "version": 0, "opaque": 7,
                      "flag": 0, "extFields": {"brokerName": "a"}}
    assert data.endswith(b"payload")


def test_round_trip_request_and_response() -> None:
    request = RemotingCommand.request(1004, {"brokerName": "broker-a"}, b"x", opaque=3,
                                      oneway=True)
    response = RemotingCommand.response(2007, remark="not leader", opaque=3, body=b"\x00\xff")
    assert decode_all(encode(request) + encode(response)) == [request, response]
    assert request.is_oneway and not request.is_response
    assert response.is_response and response.flag == FLAG_RESPONSE
    assert request.flag == FLAG_ONEWAY


def test_encode_into_appends() -> None:
    buffer = bytearray(b"prefix")
    command = RemotingCommand(code=1)
    encode_into(buffer, command)
    assert bytes(buffer) == b"prefix" + encode(command)


def test_accepts_a_java_header() -> None:
    # What RocketMQ's Java client sends: extra keys are ignored, remark may be null.
    header = json.dumps({"code": 105, "extFields": {"topic": "t"}, "flag": 0,
                         "language": "JAVA", "opaque": 12, "remark": None,
                         "serializeTypeCurrentRPC": "JSON", "version": 453}).encode()
    [command] = decode_all(frame(header, b"b"))
    assert command == RemotingCommand(code=105, opaque=12, ext_fields={"topic": "t"},
                                      body=b"b", language="JAVA", version=453)


def test_text_a_peer_sent_always_encodes_again() -> None:
    # A lone surrogate is valid JSON; echoing it back must not fail.
    header = b'{"code": 1, "remark": "\\ud800", "extFields": {"k": "\\udfff"}}'
    [command] = decode_all(frame(header))
    assert command.remark == "\ud800"
    assert decode_all(encode(command)) == [command]
    assert encode(RemotingCommand(code=1, remark="ü")).isascii()


def test_unencodable_commands_append_nothing() -> None:
    buffer = bytearray(b"kept")
    with pytest.raises(TypeError, match="body must be bytes"):
        encode_into(buffer, RemotingCommand(code=1, body="text"))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_into(buffer, RemotingCommand(code="1"))  # type: ignore[arg-type]
    assert buffer == b"kept"


def test_frames_split_anywhere() -> None:
    commands = [RemotingCommand(code=i, opaque=i, body=bytes(range(i))) for i in range(5)]
    data = b"".join(encode(c) for c in commands)
    for step in (1, 3, 7, 64):
        decoder = FrameDecoder()
        got = []
        for start in range(0, len(data), step):
            decoder.feed(data[start:start + step])
            got.extend(decoder)
        assert got == commands
        assert decoder.buffered == 0


def test_ext_fields_must_be_strings() -> None:
    with pytest.raises(TypeError, match="str to str"):
        RemotingCommand(code=1, ext_fields={"n": 1})  # type: ignore[dict-item]


# -- bad input -----------------------------------------------------------------


def expect_error(data: bytes, match: str, *, max_frame_size: int = 1 << 20) -> FrameError:
    decoder = FrameDecoder(max_frame_size)
    decoder.feed(data)
    with pytest.raises(FrameError, match=match) as info:
        list(decoder)
        decoder.feed_eof()
    assert isinstance(info.value, TriomqError)
    return info.value


def test_negative_length() -> None:
    expect_error(struct.pack(">i", -5), "length field -5 is less than 4")


def test_length_too_small_for_header_word() -> None:
    expect_error(struct.pack(">i", 3), "less than 4")


def test_oversized_length_rejected_from_four_bytes() -> None:
    # Only the length has arrived: the frame is refused before any body is buffered.
    error = expect_error(struct.pack(">i", 2**31 - 1), "exceeds the maximum frame size 1024",
                         max_frame_size=1024)
    assert error.offset == 0


def test_wrong_serialize_type() -> None:
    expect_error(frame(b"{}", serialize_type=2), "unsupported serialize type 2")
    expect_error(frame(b"{}", serialize_type=1), "binary header: fixed fields")


def test_header_length_beyond_frame() -> None:
    expect_error(frame(b"{}", header_length=100), "header length 100 exceeds frame length 6")


@pytest.mark.parametrize(("header", "match"), [
    (b"{not json", "invalid JSON header"),
    (b"\xff\xfe", "invalid JSON header"),
    (b"[1, 2]", "is a list, not an object"),
    (b'{"opaque": 1}', "'code' is None, not a 32-bit integer"),
    (b'{"code": "10"}', "'code' is '10', not a 32-bit integer"),
    (b'{"code": true}', "'code' is True"),
    (b'{"code": 1.5}', "'code' is 1.5"),
    (b'{"code": 2147483648}', "'code' is 2147483648"),
    (b'{"code": 1, "opaque": null}', "'opaque' is None"),
    (b'{"code": 1, "flag": "1"}', "'flag' is '1'"),
    (b'{"code": 1, "version": []}', "'version' is \\[\\]"),
    (b'{"code": 1, "language": 5}', "'language' is 5, not a string"),
    (b'{"code": 1, "remark": 5}', "'remark' is 5, not a string"),
    (b'{"code": 1, "extFields": [1]}', "'extFields' is \\[1\\], not an object"),
    (b"[" * 100_000 + b"]" * 100_000, "invalid JSON header"),
])
def test_bad_header(header: bytes, match: str) -> None:
    expect_error(frame(header), match)


def test_truncated_frame_at_eof() -> None:
    data = encode(RemotingCommand(code=1, body=b"0123456789"))
    decoder = FrameDecoder()
    decoder.feed(data[:-3])
    assert list(decoder) == []
    assert decoder.buffered == len(data) - 3
    with pytest.raises(FrameError, match="stream ended inside a frame"):
        decoder.feed_eof()


def test_error_names_the_offset_of_the_bad_frame() -> None:
    good = encode(RemotingCommand(code=1))
    error = expect_error(good + good + frame(b"{bad"), "invalid JSON")
    assert error.offset == 2 * len(good)
    assert f"offset {2 * len(good)}" in str(error)


def test_decoder_stays_broken_after_an_error() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">i", -1))
    with pytest.raises(FrameError):
        decoder.next_command()
    decoder.feed(encode(RemotingCommand(code=1)))
    with pytest.raises(FrameError):
        decoder.next_command()


def test_max_frame_size_must_hold_the_header_word() -> None:
    with pytest.raises(ValueError, match="at least 4"):
        FrameDecoder(3)


# -- fuzzing -------------------------------------------------------------------

int32 = st.integers(-(2**31), 2**31 - 1)
commands = st.builds(
    RemotingCommand,
    code=int32, opaque=int32, flag=int32,
    remark=st.none() | st.text(max_size=20),
    ext_fields=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=4),
    body=st.binary(max_size=64),
    language=st.sampled_from(["PYTHON", "JAVA", "GO"]) | st.text(max_size=5),
    version=int32,
)


@given(st.lists(commands, max_size=5), st.integers(1, 50))
def test_fuzz_round_trip(original: list[RemotingCommand], step: int) -> None:
    data = b"".join(encode(c) for c in original)
    decoder = FrameDecoder()
    got = []
    for start in range(0, len(data), step):
        decoder.feed(data[start:start + step])
        got.extend(decoder)
    decoder.feed_eof()
    assert got == original


@settings(max_examples=300)
@given(st.binary(max_size=300), st.integers(1, 40))
def test_fuzz_garbage_raises_only_frame_error(data: bytes, step: int) -> None:
    max_frame_size = 128
    decoder = FrameDecoder(max_frame_size)
    with contextlib.suppress(FrameError):
        for start in range(0, len(data), step):
            decoder.feed(data[start:start + step])
            list(decoder)
            # Never more than one frame's worth (plus the chunk just fed) is held.
            assert decoder.buffered <= 4 + max_frame_size + step
        decoder.feed_eof()


@given(commands, st.binary(min_size=1, max_size=40), st.integers(0, 200))
def test_fuzz_corrupted_frame(command: RemotingCommand, junk: bytes, position: int) -> None:
    data = bytearray(encode(command))
    position %= len(data)
    data[position:position + len(junk)] = junk
    with contextlib.suppress(FrameError):
        decode_all(bytes(data))
