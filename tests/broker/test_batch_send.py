"""SEND_BATCH_MESSAGE: RocketMQ batches stored with one append; a bad batch stores nothing."""

from __future__ import annotations

import struct
import zlib

from broker_nodes import Cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.headers import parse_offset_msg_id


def java_message(body: bytes, properties: bytes = b"", flag: int = 0) -> bytes:
    """One message as MessageDecoder.encodeMessage writes it (magic and body CRC 0)."""
    total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(properties)
    return (struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body
            + struct.pack(">h", len(properties)) + properties)


HEADER = {"a": "pg", "b": "orders", "c": "TBW102", "d": "4", "e": "1", "f": "0",
          "g": "1700000000000", "h": "0", "i": "WAIT\x01true\x02", "j": "0", "k": "false",
          "m": "true"}
BATCH = (java_message(b"first", b"KEYS\x01k1\x02UNIQ_KEY\x01AAA\x02", flag=7)
         + java_message(b"", b"UNIQ_KEY\x01BBB\x02")
         + java_message(b"third" * 100, b"TAGS\x01blue\x02UNIQ_KEY\x01CCC\x02"))


async def test_a_batch_is_stored_with_one_append_and_read_back(tmp_path) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", extra="max_message_size = 2048") as a, \
            cluster.client() as client:
        answer = await client.rpc.invoke(a.node.address, RequestCode.SEND_BATCH_MESSAGE,
                                         HEADER, BATCH)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        ids = answer.ext_fields["msgId"].split(",")
        assert len(ids) == 3 and answer.ext_fields["queueOffset"] == "0"
        assert answer.ext_fields["queueId"] == "1"
        records = [a.log.read_record(parse_offset_msg_id(i)[1]) for i in ids]
        assert [r.body for r in records] == [b"first", b"", b"third" * 100]
        assert [r.flag for r in records] == [7, 0, 0]
        assert [r.queue_offset for r in records] == [0, 1, 2]
        assert {(r.topic, r.queue_id, r.born_timestamp) for r in records} == {
            ("orders", 1, 1700000000000)}
        cluster = {"CLUSTER": "DefaultCluster"}  # RocketMQ 5 adds it to every message
        assert records[0].properties == {"KEYS": "k1", "UNIQ_KEY": "AAA", "WAIT": "true",
                                         **cluster}
        assert records[2].properties == {"TAGS": "blue", "UNIQ_KEY": "CCC", "WAIT": "true",
                                         **cluster}
        # The broker computed the stored CRC the client left 0.
        stored = a.log.read(records[2].physical_offset, 12)
        assert struct.unpack(">i", stored[8:12])[0] == zlib.crc32(b"third" * 100) & 0x7FFFFFFF
        # A second batch goes on at the queue's next offset.
        answer = await client.rpc.invoke(a.node.address, RequestCode.SEND_BATCH_MESSAGE,
                                         HEADER, java_message(b"more"))
        assert answer.ext_fields["queueOffset"] == "3"
        assert a.log.queue_max_offset("orders", 1) == 4


BAD = [
    (java_message(b"ok") + b"\x00\x00\x00", "batch message 1 (at byte 24): totalSize: 3 bytes "
                                            "left, a message needs at least 22"),
    (java_message(b"ok") + struct.pack(">iiiii", 40, 0, 0, 0, 2) + b"xx\x00\x00",
     "batch message 1 (at byte 24): totalSize: 40 is not within 22..24 (bytes left)"),
    (java_message(b"ok") + struct.pack(">iiiii", 24, 0, 0, 0, 9) + b"xx\x00\x00",
     "batch message 1 (at byte 24): bodyLength: 9 does not fit in totalSize 24"),
    (java_message(b"ok") + struct.pack(">iiiii", 26, 0, 0, 0, 2) + b"xx\x00\x00xx",
     "batch message 1 (at byte 24): totalSize: 26, but the fields add up to 24"),
    (java_message(b"ok", b"\xff\xfe"), "batch message 0 (at byte 0): properties: properties "
                                       "are not valid UTF-8"),
    (java_message(b"ok", b"KEYS"), "batch message 0 (at byte 0): properties: property 'KEYS' "
                                   "has no value separator"),
    (b"", "batch message 0 (at byte 0): body: the batch holds no message"),
]


async def test_bad_batches_are_refused_by_message_and_field_and_store_nothing(tmp_path
                                                                              ) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", extra="max_message_size = 2048") as a, \
            cluster.client() as client:
        end = a.log.max_offset
        for body, remark in BAD:
            answer = await client.rpc.invoke(a.node.address, RequestCode.SEND_BATCH_MESSAGE,
                                             HEADER, body)
            assert (answer.code, answer.remark) == (ResponseCode.MESSAGE_ILLEGAL, remark)
        for fields, body, code, remark in [
            (HEADER, java_message(b"x" * 2100), ResponseCode.MESSAGE_ILLEGAL,
             "message body: 2122 bytes exceed max_message_size 2048"),
            ({**HEADER, "b": "%RETRY%cg"}, BATCH, ResponseCode.MESSAGE_ILLEGAL,
             "batch request does not support retry group %RETRY%cg"),
            ({**HEADER, "e": "x"}, BATCH, ResponseCode.MESSAGE_ILLEGAL,
             "header field 'queueId': expected an integer, got 'x'"),
            ({**HEADER, "i": "K\x01" + "v" * 40000 + "\x02"}, BATCH,
             # 40,024 bytes and the broker's CLUSTER entry (23)
             ResponseCode.MESSAGE_ILLEGAL, "batch message 0 (at byte 0): properties: 40047 "
                                           "bytes with the header's, at most 32767"),
            ({**HEADER, "e": "9"}, BATCH, ResponseCode.MESSAGE_ILLEGAL,
             "request queueId[9] is illegal: topic orders has 4 write queues"),
        ]:
            answer = await client.rpc.invoke(a.node.address, RequestCode.SEND_BATCH_MESSAGE,
                                             fields, body)
            assert (answer.code, answer.remark) == (code, remark)
        assert a.log.max_offset == end  # nothing stored
        good = await client.rpc.invoke(a.node.address, RequestCode.SEND_BATCH_MESSAGE,
                                       HEADER, BATCH)
        assert good.code == ResponseCode.SUCCESS  # the connection served on


async def test_a_slave_refuses_batches(cluster) -> None:
    async with cluster.broker("m") as m, \
            cluster.broker("s", broker_id=1, master=m.ha_address) as s, \
            cluster.client() as client:
        answer = await client.rpc.invoke(s.node.address, RequestCode.SEND_BATCH_MESSAGE,
                                         HEADER, BATCH)
        assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE


ALLOWED = {ResponseCode.SUCCESS, ResponseCode.MESSAGE_ILLEGAL}
messages = st.tuples(st.binary(max_size=300), st.one_of(
    st.binary(max_size=60),
    st.dictionaries(st.text(max_size=10), st.text(max_size=20), max_size=3).map(
        lambda d: "".join(f"{k}\x01{v}\x02" for k, v in d.items()).encode())),
    st.integers(-2**31, 2**31 - 1)).map(lambda m: java_message(m[0], m[1][:32767], m[2]))
bodies = st.one_of(
    st.lists(messages, max_size=5).map(b"".join),
    st.tuples(st.lists(messages, min_size=1, max_size=4).map(b"".join),
              st.integers(0, 2000), st.binary(min_size=1, max_size=8)).map(
        lambda t: t[0][:t[1]] + t[2] + t[0][t[1] + len(t[2]):]),
    st.binary(max_size=400))


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(bodies, min_size=1, max_size=30))
async def test_every_batch_gets_a_specific_answer_and_no_leak(tmp_path, batch) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", extra="max_message_size = 1024") as a, \
            cluster.client() as client:
        for body in batch:
            before = a.log.max_offset
            answer = await client.rpc.invoke(a.node.address, RequestCode.SEND_BATCH_MESSAGE,
                                             HEADER, body)
            remark = answer.remark or ""
            assert answer.code in ALLOWED, (body, answer.code, remark)
            assert str(tmp_path) not in remark and "Traceback" not in remark
            if answer.code != ResponseCode.SUCCESS:
                assert a.log.max_offset == before
