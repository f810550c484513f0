"""Frames as other RocketMQ clients send them: lenient extFields and the binary header.

Every frame here is put together by hand with ``struct`` from RocketMQ's
``RemotingCommand`` / ``RocketMQSerializable`` layouts, not by triomq's encoder.
"""

from __future__ import annotations

import contextlib
import json
import struct

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from triomq.namesrv.core.processor import NameServerCore
from triomq.protocol.remoting import FrameDecoder, FrameError, RemotingCommand
from triomq.rpc import RpcConnection


def json_frame(header: dict, body: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack(">iI", 4 + len(raw) + len(body), len(raw)) + raw + body


def binary_header(code: int, opaque: int, flag: int, remark: str | None,
                  fields: dict[str, str], language: int = 0, version: int = 475) -> bytes:
    ext = b"".join(struct.pack(">h", len(k.encode())) + k.encode()
                   + struct.pack(">i", len(v.encode())) + v.encode() for k, v in fields.items())
    note = (remark or "").encode()
    return (struct.pack(">hbhii", code, language, version, opaque, flag)
            + struct.pack(">i", len(note)) + note + struct.pack(">i", len(ext)) + ext)


def binary_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (1 << 24) | len(header)) \
        + header + body


def decode_one(data: bytes) -> RemotingCommand:
    decoder = FrameDecoder()
    decoder.feed(data)
    (command,) = list(decoder)
    return command


def test_ext_field_numbers_and_booleans_read_as_their_text() -> None:
    command = decode_one(json_frame({
        "code": 904, "language": "GO", "version": 0, "opaque": 3, "flag": 0,
        "extFields": {"brokerId": 2, "compressed": False, "enableActingMaster": True,
                      "brokerName": "broker-a", "zoneName": None, "ratio": 1.5}}))
    assert command.ext_fields == {"brokerId": "2", "compressed": "false",
                                  "enableActingMaster": "true", "brokerName": "broker-a",
                                  "ratio": "1.5"}


def test_a_binary_header_built_by_hand_decodes() -> None:
    header = binary_header(105, 77, 0, None, {"topic": "orders", "k\u00e9y": "v\u00e9"})
    command = decode_one(binary_frame(header, b"body"))
    assert (command.code, command.opaque, command.flag, command.language,
            command.version) == (105, 77, 0, "JAVA", 475)
    assert command.remark is None
    assert command.ext_fields == {"topic": "orders", "k\u00e9y": "v\u00e9"}
    assert command.body == b"body"
    assert command.serialize_type == 1


@pytest.mark.parametrize("header, fragment", [
    (b"\x00" * 12, "fixed fields"),
    (struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">i", 50), "remark of 50 bytes"),
    (struct.pack(">hbhiii", 1, 0, 0, 0, 0, 0) + struct.pack(">i", 9) + b"\x00\x09abc",
     "extFields of 9 bytes"),
    (struct.pack(">hbhiii", 1, 0, 0, 0, 0, 0) + struct.pack(">i", 3) + b"\x00\x09a",
     "extFields key of 9 bytes"),
    (struct.pack(">hbhiii", 1, 0, 0, 0, 0, 2) + b"\xff\xfe" + struct.pack(">i", 0),
     "remark is not UTF-8"),
    (struct.pack(">hbhiii", 1, 0, 0, 0, 0, 0) + struct.pack(">i", 0) + b"xx",
     "2 bytes after extFields"),
])
def test_bad_binary_headers_name_what_and_where(header: bytes, fragment: str) -> None:
    with pytest.raises(FrameError, match=fragment):
        decode_one(binary_frame(header))


@given(st.binary(max_size=120), st.binary(max_size=20))
def test_any_binary_header_decodes_or_raises_frame_error(header: bytes, body: bytes) -> None:
    decoder = FrameDecoder()
    decoder.feed(binary_frame(header, body))
    with contextlib.suppress(FrameError):
        list(decoder)


REGISTER_FIELDS = {"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911",
                   "clusterName": "DefaultCluster", "haServerAddr": "10.0.0.1:10912",
                   "brokerId": "0", "compressed": "false", "bodyCrc32": "0"}


def _answers(frames: list[bytes]) -> list[RemotingCommand]:
    """Send raw frames to a name server over a real RPC connection; its answers, decoded."""
    core = NameServerCore()

    async def handle(request: RemotingCommand, peer: object) -> RemotingCommand:
        return core.handle(request, peer, 0)

    handlers = {code: handle for code in core.codes}
    answers: list[RemotingCommand] = []

    async def main() -> None:
        client, served = trio.testing.memory_stream_pair()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(RpcConnection(served, handlers=handlers).run)
            decoder = FrameDecoder()
            for data in frames:
                await client.send_all(data)
                while True:
                    decoder.feed(await client.receive_some(65536))
                    got = list(decoder)
                    if got:
                        answers.extend(got)
                        break
            nursery.cancel_scope.cancel()

    trio.run(main)
    return answers


def test_numbers_booleans_and_binary_headers_get_the_answers_of_their_string_forms() -> None:
    body = (b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"stateVersion":0,'
            b'"timestamp":1},"topicConfigTable":{"orders":{"topicName":"orders"}}}}')
    as_strings = _answers([
        json_frame({"code": 103, "opaque": 1, "flag": 0, "extFields": REGISTER_FIELDS}, body),
        json_frame({"code": 105, "opaque": 2, "flag": 0, "extFields": {"topic": "orders"}}),
    ])
    typed = dict(REGISTER_FIELDS, brokerId=0, compressed=False, bodyCrc32=0)
    as_values = _answers([
        json_frame({"code": 103, "opaque": 1, "flag": 0, "extFields": typed}, body),
        json_frame({"code": 105, "opaque": 2, "flag": 0, "extFields": {"topic": "orders"}}),
    ])
    as_binary = _answers([
        binary_frame(binary_header(103, 1, 0, None, REGISTER_FIELDS), body),
        binary_frame(binary_header(105, 2, 0, None, {"topic": "orders"})),
    ])

    def shape(answers: list[RemotingCommand]) -> list[tuple]:
        return [(a.code, a.opaque, a.remark, dict(a.ext_fields), a.body) for a in answers]
    assert shape(as_strings) == shape(as_values) == shape(as_binary)
    assert as_strings[1].code == 0 and b"10.0.0.1:10911" in as_strings[1].body
    assert [a.serialize_type for a in as_binary] == [1, 1]
    assert [a.serialize_type for a in as_strings] == [0, 0]
