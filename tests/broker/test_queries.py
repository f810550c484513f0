"""Message queries: by key through the index file, by offset id, by time."""

from __future__ import annotations

import ipaddress
import os
import struct

import pytest
import trio
from broker_nodes import Cluster, caught_up, wait_until

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.index.core.index_file import java_hash
from triomq.broker.send.core.put_checks import host_port
from triomq.protocol.message import decode
from triomq.testing.direct_send import DirectProducer

INDEX = "max_hash_slot_num = 64\nmax_index_num = 16"
FOREVER = {"beginTimestamp": "0", "endTimestamp": str(2**62)}


def records(body: bytes) -> list:
    found, pos = [], 0
    while pos < len(body):
        record, size = decode(body, pos)
        found.append(record)
        pos += size
    return found


async def query(client, address: str, key: str, topic: str = "orders", **extra):
    fields = {"topic": topic, "key": key, "maxNum": "32", **FOREVER, **extra}
    return await client.rpc.invoke(address, RequestCode.QUERY_MESSAGE, fields)


async def test_messages_are_found_by_key_through_the_index_after_a_restart(tmp_path) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", extra=INDEX) as a, cluster.client() as client:
        producer = DirectProducer(client.rpc, a.node.address)
        sent = []
        for i in range(12):  # 24 keys: the 16-entry files roll over
            # The producer sets each message's UNIQ_KEY: its msg_id.
            sent.append(await producer.send("orders", f"m{i}".encode(), keys=f"k{i} common"))
        await producer.send("audit", b"other topic", keys="k1")
        await wait_until(lambda: a.index.caught_up)
        answer = await query(client, a.node.address, "k3")
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert [r.body for r in records(answer.body)] == [b"m3"]
        assert int(answer.ext_fields["indexLastUpdatePhyoffset"]) > 0
        common = await query(client, a.node.address, "common", maxNum="5")
        assert [r.body for r in records(common.body)] == [f"m{i}".encode()
                                                         for i in (11, 10, 9, 8, 7)]
        assert len(a.index.store.files()) >= 2
        counts = [f.index.header.index_count for f in a.index.store._files]
    async with cluster.broker("a", extra=INDEX) as a, cluster.client() as client:
        await trio.sleep(0.1)
        # Resumed where the newest header says: nothing indexed twice.
        assert a.index.caught_up
        assert [f.index.header.index_count for f in a.index.store._files] == counts
        answer = await query(client, a.node.address, sent[7].msg_id, _UNIQUE_KEY_QUERY="true")
        assert [r.body for r in records(answer.body)] == [b"m7"]
        answer = await query(client, a.node.address, "k1", topic="audit")
        assert [r.topic for r in records(answer.body)] == ["audit"]
        common = await query(client, a.node.address, "common")
        assert len(records(common.body)) == 12  # each once, across the files
        missing = await query(client, a.node.address, "nope")
        assert (missing.code, missing.remark) == (
            ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct")
        future = await query(client, a.node.address, "k3", beginTimestamp=str(2**61))
        assert future.code == ResponseCode.QUERY_NOT_FOUND


async def test_the_index_file_bytes_are_rocketmqs(tmp_path) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", extra=INDEX) as a, cluster.client() as client:
        result = await DirectProducer(client.rpc, a.node.address).send("orders", b"x", keys="only")
        await wait_until(lambda: a.index.caught_up)
        offset = result.physical_offset
        stored = a.log.read_record(offset).store_timestamp
    names = os.listdir(tmp_path / "a" / "index")
    assert len(names) == 1 and len(names[0]) == 17 and names[0].isdigit()  # yyyyMMddHHmmssSSS
    data = (tmp_path / "a" / "index" / names[0]).read_bytes()
    assert len(data) == 40 + 64 * 4 + 16 * 20
    # Two keys: the UNIQ_KEY first, then KEYS (two slots unless they collide).
    begin, end, begin_offset, end_offset, slots, count = struct.unpack_from(">qqqqii", data, 0)
    assert (begin, end, begin_offset, end_offset, count) == (stored, stored, offset, offset, 3)
    hashes = [abs(java_hash(f"orders#{key}")) for key in (result.msg_id, "only")]
    assert slots == len({h % 64 for h in hashes})
    for number, key_hash in enumerate(hashes, start=1):
        entry = struct.unpack_from(">iqii", data, 40 + 64 * 4 + number * 20)
        assert entry[:3] == (key_hash, offset, 0)
        slot = struct.unpack_from(">i", data, 40 + (key_hash % 64) * 4)[0]
        assert slot == number or (number == 1 and hashes[0] % 64 == hashes[1] % 64)


@pytest.mark.parametrize("scheme", ["mmap", "lmdb"])
async def test_a_slave_indexes_what_it_replicates(tmp_path, scheme) -> None:
    cluster = Cluster("inproc", tmp_path, scheme)
    async with cluster.broker("m", extra=INDEX) as m, \
            cluster.broker("s", broker_id=1, master=m.ha_address, extra=INDEX) as s, \
            cluster.client() as client:
        producer = DirectProducer(client.rpc, m.node.address)
        for i in range(5):
            await producer.send("orders", f"r{i}".encode(), keys=f"rk{i}")
        await caught_up(m, s)
        await wait_until(lambda: s.index.caught_up)
        answer = await query(client, s.node.address, "rk4")
        assert [r.body for r in records(answer.body)] == [b"r4"]


def message_id(ip: str, port: int, offset: int) -> str:
    """RocketMQ's offset message id, by hand: address, port, commit-log offset."""
    return (ipaddress.ip_address(ip).packed + struct.pack(">iq", port, offset)).hex().upper()


async def test_view_message_by_an_id_built_by_hand(cluster) -> None:
    async with cluster.broker("a") as a, cluster.client() as client:
        producer = DirectProducer(client.rpc, a.node.address)
        await producer.send("orders", b"first")
        result = await producer.send("orders", b"second", keys="k")
        offset = a.log.queue_entries("orders", 0, 1, 1)[0].physical_offset
        ip, port = host_port(a.node.address)
        assert result.offset_msg_id == message_id(ip, port, offset)
        # What a client does with an id: the last 8 bytes are the offset to ask for.
        asked = struct.unpack(">q", bytes.fromhex(message_id(ip, port, offset))[-8:])[0]
        answer = await client.rpc.invoke(a.node.address, RequestCode.VIEW_MESSAGE_BY_ID,
                                         {"offset": str(asked)})
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        size = struct.unpack(">i", answer.body[:4])[0]
        assert answer.body == a.log.read(offset, size)
        assert decode(answer.body)[0].body == b"second"
        for fields, code, remark in [
            ({"offset": str(offset + 1)}, ResponseCode.SYSTEM_ERROR,
             f"can not find message by the offset, {offset + 1}"),
            ({"offset": str(10**15)}, ResponseCode.SYSTEM_ERROR,
             f"can not find message by the offset, {10**15}"),
            ({}, ResponseCode.INVALID_PARAMETER,
             "VIEW_MESSAGE_BY_ID: header field 'offset': missing"),
            ({"offset": "1e3"}, ResponseCode.INVALID_PARAMETER,
             "VIEW_MESSAGE_BY_ID: header field 'offset': expected an integer, got '1e3'"),
        ]:
            answer = await client.rpc.invoke(a.node.address, RequestCode.VIEW_MESSAGE_BY_ID,
                                             fields)
            assert (answer.code, answer.remark) == (code, remark)


async def test_offsets_by_timestamp_and_the_earliest_store_time(tmp_path) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a") as a, cluster.client() as client:
        producer = DirectProducer(client.rpc, a.node.address)
        stamps = []
        for _ in range(3):
            result = await producer.send("orders", b"x", queue_id=1)
            stamps.append(a.log.read_record(result.physical_offset).store_timestamp)
            await trio.sleep(0.01)  # store times are the wall clock's milliseconds

        async def ask(code: int, **fields) -> dict:
            answer = await client.rpc.invoke(a.node.address, code, fields)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            return answer.ext_fields

        search = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
        assert (await ask(search, topic="orders", queueId="1", timestamp="0"))["offset"] == "0"
        assert (await ask(search, topic="orders", queueId="1",
                          timestamp=str(stamps[2])))["offset"] == str(stamps.index(stamps[2]))
        assert (await ask(search, topic="orders", queueId="1",
                          timestamp=str(stamps[2] + 1)))["offset"] == "3"
        earliest = RequestCode.GET_EARLIEST_MSG_STORETIME
        assert (await ask(earliest, topic="orders", queueId="1"))["timestamp"] == str(stamps[0])
        assert (await ask(earliest, topic="orders", queueId="5"))["timestamp"] == "-1"
        for code, name, fields, remark in [
            (search, "SEARCH_OFFSET_BY_TIMESTAMP", {"queueId": "1", "timestamp": "0"},
             "header field 'topic': missing"),
            (search, "SEARCH_OFFSET_BY_TIMESTAMP", {"topic": "orders", "queueId": "1"},
             "header field 'timestamp': missing"),
            (earliest, "GET_EARLIEST_MSG_STORETIME", {"topic": "orders", "queueId": "-1"},
             "header field 'queueId': expected a non-negative integer, got '-1'"),
            (RequestCode.QUERY_MESSAGE, "QUERY_MESSAGE", {"topic": "orders", "key": "k"},
             "header field 'maxNum': missing"),
        ]:
            answer = await client.rpc.invoke(a.node.address, code, fields)
            assert (answer.code, answer.remark) == (ResponseCode.INVALID_PARAMETER,
                                                    f"{name}: {remark}")


async def test_indexing_pauses_on_a_file_error_and_catches_up(tmp_path, autojump_clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with cluster.broker("a", extra="max_hash_slot_num = 8\nmax_index_num = 2") as a, \
            cluster.client() as client:
        producer = DirectProducer(client.rpc, a.node.address)
        await producer.send("orders", b"one", keys="k1")  # UNIQ_KEY, then k1: two files
        await wait_until(lambda: a.index.caught_up)
        store = a.index.store
        new_file = store._new_file

        def no_space():
            raise OSError(28, "No space left on device")

        store._new_file = no_space
        await producer.send("orders", b"two", keys="k2")  # the put itself succeeds
        await trio.sleep(5)
        assert not a.index.caught_up
        store._new_file = new_file
        await wait_until(lambda: a.index.caught_up)
        answer = await query(client, a.node.address, "k2")
        assert [r.body for r in records(answer.body)] == [b"two"]
