"""The decoder's bounds on one frame's work: header size and extFields count."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from triomq.protocol.remoting import (
    FLAG_ONEWAY,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    FrameDecoder,
    FrameError,
    OverLimit,
    RemotingCommand,
    encode,
    encode_into,
)


def _prefix(header_length: int, length: int, serialize_type: int = SERIALIZE_JSON) -> bytes:
    return struct.pack(">iI", length, (serialize_type << 24) | header_length)


def _command(fields: int, *, serialize_type: int = SERIALIZE_JSON, opaque: int = 9,
             flag: int = 0) -> RemotingCommand:
    return RemotingCommand(310, opaque, flag, None, {f"k{i}": "v" for i in range(fields)},
                           b"body", serialize_type=serialize_type)


def test_a_header_over_the_limit_is_refused_from_its_length_alone() -> None:
    decoder = FrameDecoder(max_header_size=1024)
    # 13.5 MB announced: only the 8-byte prefix has arrived.
    decoder.feed(_prefix(13_500_000, 13_500_004))
    with pytest.raises(FrameError, match="header length 13500000 exceeds the maximum header "
                                         "size 1024") as caught:
        decoder.next_command()
    assert caught.value.offset == 0
    assert decoder.buffered == 8  # nothing more was waited for
    with pytest.raises(FrameError):  # the stream stays refused
        decoder.next_command()


def test_a_header_at_the_limit_decodes() -> None:
    command = _command(3)
    data = encode(command)
    header_length = struct.unpack_from(">I", data, 4)[0] & 0xFFFFFF
    decoder = FrameDecoder(max_header_size=header_length)
    decoder.feed(data)
    assert decoder.next_command() == command


@pytest.mark.parametrize("serialize_type", [SERIALIZE_JSON, SERIALIZE_ROCKETMQ])
def test_too_many_ext_fields_raise_over_limit_and_the_stream_goes_on(serialize_type) -> None:
    decoder = FrameDecoder(max_ext_fields=4)
    data = bytearray()
    encode_into(data, _command(5, serialize_type=serialize_type, opaque=41))
    encode_into(data, _command(4, serialize_type=serialize_type, opaque=42))
    decoder.feed(data)
    with pytest.raises(OverLimit, match="extFields; the maximum is 4") as caught:
        decoder.next_command()
    refused = caught.value
    assert (refused.code, refused.opaque, refused.flag, refused.serialize_type, refused.offset
            ) == (310, 41, 0, serialize_type, 0)
    following = decoder.next_command()
    assert following is not None and following.opaque == 42
    assert decoder.buffered == 0


def test_a_foreign_json_header_is_counted_too() -> None:
    # Keys in fastjson's order, numbers as values: the general JSON path.
    header = json.dumps({"code": 310, "extFields": {f"k{i}": i for i in range(6)}, "flag": 2,
                         "language": "JAVA", "opaque": 5, "version": 479}).encode()
    decoder = FrameDecoder(max_ext_fields=5)
    decoder.feed(_prefix(len(header), 4 + len(header)) + header)
    with pytest.raises(OverLimit) as caught:
        decoder.next_command()
    assert (caught.value.opaque, caught.value.flag) == (5, FLAG_ONEWAY)


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        FrameDecoder(max_ext_fields=-1)


@settings(max_examples=150, deadline=None)
@given(fields=st.integers(0, 40), limit=st.integers(0, 40),
       serialize_type=st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]),
       chunk=st.integers(1, 64))
def test_fuzz_ext_field_limit(fields: int, limit: int, serialize_type: int, chunk: int) -> None:
    """Fed in any chunks, a frame decodes iff it is within the limit; the next always does."""
    data = bytearray()
    encode_into(data, _command(fields, serialize_type=serialize_type, opaque=1))
    encode_into(data, _command(min(fields, limit), serialize_type=serialize_type, opaque=2))
    decoder = FrameDecoder(max_ext_fields=limit)
    decoded, refused = [], []
    for start in range(0, len(data), chunk):
        decoder.feed(data[start:start + chunk])
        while True:
            try:
                command = decoder.next_command()
            except OverLimit as exc:
                refused.append(exc.opaque)
                continue
            if command is None:
                break
            decoded.append(command.opaque)
    decoder.feed_eof()
    assert (decoded, refused) == (([1, 2], []) if fields <= limit else ([2], [1]))


@settings(max_examples=150, deadline=None)
@given(header_length=st.integers(0, (1 << 24) - 1), limit=st.integers(0, 1 << 20),
       serialize_type=st.sampled_from([SERIALIZE_JSON, SERIALIZE_ROCKETMQ]))
def test_fuzz_header_limit_is_checked_before_the_header_arrives(header_length: int, limit: int,
                                                               serialize_type: int) -> None:
    decoder = FrameDecoder(1 << 25, max_header_size=limit)
    decoder.feed(_prefix(header_length, 4 + header_length, serialize_type))
    if header_length > limit:
        with pytest.raises(FrameError, match="maximum header size"):
            decoder.next_command()
    elif header_length:
        assert decoder.next_command() is None  # waits for the header


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 8), st.integers(0, 64))
def test_fuzz_any_bytes_decode_or_raise_typed_errors(data: bytes, fields: int,
                                                     header: int) -> None:
    decoder = FrameDecoder(max_header_size=header, max_ext_fields=fields)
    decoder.feed(data)
    try:
        while True:
            try:
                command = decoder.next_command()
            except OverLimit:
                continue
            if command is None:
                break
            assert len(command.ext_fields) <= fields
    except FrameError:
        pass
