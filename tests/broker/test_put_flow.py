"""One put's flow without an event loop: its checks in RocketMQ's order, the append,
the waits for the flush and the replicas, and the answer, with explicit times."""

from __future__ import annotations

import errno
import struct
import zlib

import attrs
import pytest

from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.broker.core.escape_bridge import EscapedMessage
from triomq.broker.core.headers import offset_msg_id
from triomq.broker.metadata.core.topic_table import TopicTable
from triomq.broker.send.core.put_checks import BrokerState, PutSettings
from triomq.broker.send.core.put_flow import (
    Append,
    PutFlow,
    PutReply,
    TopicCreated,
    WaitFlushed,
    WaitReplicated,
)
from triomq.ha.core.sync_replication import ReplicationStatus
from triomq.protocol.message import RecordError
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.route import PERM_READ, TopicConfig

STORE = ("10.0.0.9", 10911)
SETTINGS = PutSettings(
    broker_name="broker-a", cluster_name="DefaultCluster", max_message_size=1024,
    min_in_sync_replicas=1, auto_create_topic_enable=True, auto_create_topic_limit=100,
    default_topic_queue_nums=4, sync_flush_timeout=5000, flush_policy="group",
    store_host=STORE, segment_size=1 << 20)
MASTER = BrokerState(broker_id=0, role="master", is_master=True, in_sync_replicas=2)
SLAVE = BrokerState(broker_id=1, role="slave", is_master=False, in_sync_replicas=0)
PEER = "tcp://10.0.0.5:40000"
HEADER = {"a": "pg", "b": "orders", "c": "TBW102", "d": "4", "e": "1", "f": "0",
          "g": "1700000000000", "h": "0", "i": "KEYS\x01k1\x02", "j": "0"}


def table() -> TopicTable:
    topics = TopicTable.with_system_topics("DefaultCluster", "broker-a", auto_create=True,
                                           now=0)
    topics.update(TopicConfig("orders", 4, 4), 0)
    return topics


def request(body: bytes = b"hello", code: int = RequestCode.SEND_MESSAGE_V2,
            **fields: str) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields={**HEADER, **fields}, body=body)


def new_id(wall_ms: int) -> str:
    return f"ID-{wall_ms}"


def start(req: RemotingCommand, broker: BrokerState = MASTER, topics: TopicTable | None = None,
          settings: PutSettings = SETTINGS, now: float = 10.0) -> tuple[PutFlow, object]:
    flow = PutFlow(settings, now=now)
    action = flow.start(req, PEER, broker, topics if topics is not None else table(),
                        store_ms=1_700_000_000_500, new_id=new_id)
    return flow, action


def refused(action: object) -> tuple[int, str]:
    assert isinstance(action, PutReply), action
    return action.response.code, action.response.remark or ""


def java_message(body: bytes, properties: bytes = b"", flag: int = 0) -> bytes:
    total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(properties)
    return (struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body
            + struct.pack(">h", len(properties)) + properties)


def test_a_send_is_appended_flushed_replicated_then_answered_with_where_it_went() -> None:
    flow, action = start(request())
    assert isinstance(action, Append) and not action.batch
    (record,) = action.records
    assert (record.topic, record.queue_id, record.body) == ("orders", 1, b"hello")
    assert record.born_host == ("10.0.0.5", 40000) and record.store_host == STORE
    assert (record.born_timestamp, record.store_timestamp) == (1700000000000, 1_700_000_000_500)
    # The cluster name as RocketMQ 5 adds it, and a message id made from the store time.
    assert record.properties == {"KEYS": "k1", "CLUSTER": "DefaultCluster",
                                 "UNIQ_KEY": "ID-1700000000500"}
    wait = flow.appended([(4096, 200, 7)], now=10.5)
    assert wait == WaitFlushed(offset=4296, deadline=15.0)
    replicate = flow.flushed(4296, now=11.0)
    assert replicate == WaitReplicated(offset=4296, timeout_ms=4000)
    answer = flow.replicated(ReplicationStatus.PUT_OK)
    assert answer.response.code == ResponseCode.SUCCESS
    assert answer.response.ext_fields == {"msgId": offset_msg_id(STORE, 4096), "queueId": "1",
                                          "queueOffset": "7"}


def test_a_message_id_the_producer_set_is_kept() -> None:
    _, action = start(request(i="UNIQ_KEY\x01MINE\x02"))
    assert isinstance(action, Append)
    assert action.records[0].properties["UNIQ_KEY"] == "MINE"


def test_timeouts_and_a_lost_role_still_say_where_the_message_was_stored() -> None:
    flow, _ = start(request())
    flow.appended([(0, 100, 0)], now=10.0)
    late = flow.flushed(50, now=15.0)  # the deadline passed with half of it flushed
    assert refused(late) == (ResponseCode.FLUSH_DISK_TIMEOUT, "flush to disk timed out")
    assert late.response.ext_fields["queueOffset"] == "0"
    expected = {
        ReplicationStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
        ReplicationStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: ResponseCode.SYSTEM_ERROR,
        None: ResponseCode.SERVICE_NOT_AVAILABLE,
    }
    for status, code in expected.items():
        flow, _ = start(request())
        flow.appended([(0, 100, 0)], now=10.0)
        assert isinstance(flow.flushed(100, now=16.0), WaitReplicated)  # no time left: 0 ms
        answer = flow.replicated(status)
        assert answer.response.code == code
        assert answer.response.ext_fields["msgId"] == offset_msg_id(STORE, 0)
    assert "stopped being master" in (answer.response.remark or "")


def test_no_flush_policy_goes_straight_to_the_replicas() -> None:
    flow, _ = start(request(), settings=attrs.evolve(SETTINGS, flush_policy="none"))
    assert flow.appended([(0, 100, 0)], now=12.0) == WaitReplicated(100, 3000)


def test_the_checks_run_in_rocketmq_order_and_nothing_is_stored_on_a_refusal() -> None:
    too_big = b"x" * 2000
    # A slave refuses first, whatever else is wrong.
    code, remark = refused(start(request(too_big, b="bad topic"), broker=SLAVE)[1])
    assert code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert "broker-a id 1 is slave, not master" in remark
    # Then the size, before the topic.
    code, remark = refused(start(request(too_big, b="bad topic"))[1])
    assert code == ResponseCode.MESSAGE_ILLEGAL and "max_message_size 1024" in remark
    assert refused(start(request(b="bad topic"))[1])[0] == ResponseCode.INVALID_PARAMETER
    assert refused(start(request(b="SCHEDULE_TOPIC_XXXX"))[1])[0] == ResponseCode.NO_PERMISSION
    topics = table()
    topics.update(TopicConfig("read-only", 4, 4, PERM_READ), 0)
    code, remark = refused(start(request(b="read-only"), topics=topics)[1])
    assert code == ResponseCode.NO_PERMISSION and "perm" in remark
    code, remark = refused(start(request(e="4"))[1])
    assert code == ResponseCode.MESSAGE_ILLEGAL and "queueId[4] is illegal" in remark
    code, remark = refused(start(request(a="bad group!"))[1])
    assert code == ResponseCode.INVALID_PARAMETER and remark.startswith("producerGroup")
    # The SyncStateSet last: too small, nothing is stored, so a retry stores no duplicate.
    strict = attrs.evolve(SETTINGS, min_in_sync_replicas=3)
    code, remark = refused(start(request(), settings=strict)[1])
    assert code == ResponseCode.SYSTEM_ERROR
    assert "holds 2 of min_in_sync_replicas 3; nothing was stored" in remark
    code, remark = refused(start(request(g="soon"))[1])
    assert code == ResponseCode.MESSAGE_ILLEGAL and "'bornTimestamp'" in remark


def test_a_compressed_body_inflating_past_the_limit_is_refused() -> None:
    bomb = zlib.compress(b"\0" * 4096)
    code, remark = refused(start(request(bomb, f="1"))[1])  # sysFlag 1: compressed
    assert code == ResponseCode.MESSAGE_ILLEGAL and "(max_message_size)" in remark
    _, action = start(request(zlib.compress(b"small"), f="1"))
    assert isinstance(action, Append)


def test_an_unknown_topic_is_created_from_the_default_one_and_saved() -> None:
    topics = table()
    flow, action = start(request(b="new-topic", d="2"), topics=topics)
    assert action == TopicCreated("new-topic")
    assert topics.get("new-topic").write_queue_nums == 2
    assert isinstance(flow.resume(), Append)
    # Created, then refused by a later check: the table changed all the same.
    strict = attrs.evolve(SETTINGS, min_in_sync_replicas=3)
    flow, action = start(request(b="newer"), topics=topics, settings=strict)
    assert action == TopicCreated("newer")
    assert refused(flow.resume())[0] == ResponseCode.SYSTEM_ERROR
    full = attrs.evolve(SETTINGS, auto_create_topic_limit=len(topics))
    code, remark = refused(start(request(b="newest"), topics=topics, settings=full)[1])
    assert code == ResponseCode.TOPIC_NOT_EXIST and "auto_create_topic_limit" in remark
    off = attrs.evolve(SETTINGS, auto_create_topic_enable=False)
    code, remark = refused(start(request(b="newest"), topics=topics, settings=off)[1])
    assert code == ResponseCode.TOPIC_NOT_EXIST and remark.endswith("apply first please!")


def test_a_batch_is_one_append_of_every_checked_message() -> None:
    body = (java_message(b"first", b"UNIQ_KEY\x01AAA\x02", flag=7)
            + java_message(b"second", b"UNIQ_KEY\x01BBB\x02"))
    flow, action = start(request(body, RequestCode.SEND_BATCH_MESSAGE, m="true"))
    assert isinstance(action, Append) and action.batch
    assert [(r.body, r.flag, r.properties["UNIQ_KEY"]) for r in action.records] == [
        (b"first", 7, "AAA"), (b"second", 0, "BBB")]
    assert all(r.properties["KEYS"] == "k1" for r in action.records)  # the header's added
    flow.appended([(0, 100, 3), (100, 90, 4)], now=10.0)
    answer = flow.replicated(ReplicationStatus.PUT_OK)
    assert answer.response.ext_fields["msgId"] == ",".join(
        offset_msg_id(STORE, at) for at in (0, 100))
    assert answer.response.ext_fields["queueOffset"] == "3"
    bad = java_message(b"ok") + java_message(b"big", b"K\x01" + b"v" * 20000 + b"\x02")
    code, remark = refused(start(request(bad, RequestCode.SEND_BATCH_MESSAGE,
                                         i="H\x01" + "w" * 20000 + "\x02"),
                                 settings=attrs.evolve(SETTINGS, max_message_size=40000))[1])
    assert code == ResponseCode.MESSAGE_ILLEGAL
    assert remark.startswith("batch message 1 (at byte 24): properties: 40029 bytes")
    code, remark = refused(start(request(body, RequestCode.SEND_BATCH_MESSAGE,
                                         b="%RETRY%pg"))[1])
    assert code == ResponseCode.MESSAGE_ILLEGAL and "retry group" in remark


def test_send_message_v1_spells_the_header_out_and_its_batch_field_decides() -> None:
    names = {"a": "producerGroup", "b": "topic", "c": "defaultTopic",
             "d": "defaultTopicQueueNums", "e": "queueId", "f": "sysFlag",
             "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes"}
    v1 = {names[key]: value for key, value in HEADER.items()}
    single = RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields=v1, body=b"one")
    _, action = start(single)
    assert isinstance(action, Append) and not action.batch
    assert (action.records[0].topic, action.records[0].queue_id) == ("orders", 1)
    batch = RemotingCommand(code=RequestCode.SEND_MESSAGE, ext_fields={**v1, "batch": "TRUE"},
                            body=java_message(b"a") + java_message(b"b"))
    _, action = start(batch)
    assert isinstance(action, Append) and action.batch and len(action.records) == 2


def test_the_brokers_own_put_passes_the_stores_checks_only() -> None:
    message = EscapedMessage(topic="SCHEDULE_TOPIC_XXXX", queue_id=3, body=b"later")
    flow = PutFlow(SETTINGS, now=0.0)
    action = flow.start_own(message, MASTER, store_ms=99, new_id=new_id)
    assert isinstance(action, Append)  # a topic clients may not send to
    (record,) = action.records
    assert (record.born_timestamp, record.born_host, record.store_host) == (99, STORE, STORE)
    assert record.properties == {"CLUSTER": "DefaultCluster", "UNIQ_KEY": "ID-99"}
    flow = PutFlow(SETTINGS, now=0.0)
    code, _ = refused(flow.start_own(message, SLAVE, store_ms=99, new_id=new_id))
    assert code == ResponseCode.SERVICE_NOT_AVAILABLE
    strict = attrs.evolve(SETTINGS, min_in_sync_replicas=3)
    code, _ = refused(PutFlow(strict, now=0.0).start_own(message, MASTER, store_ms=99,
                                                          new_id=new_id))
    assert code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize(("error", "resources", "code", "words"), [
    (RecordError(0, "topic too long"), False, ResponseCode.MESSAGE_ILLEGAL, "topic too long"),
    (OSError(errno.ENOSPC, "No space", "/data/commitlog/0000"), True,
     ResponseCode.SYSTEM_ERROR, "out of ENOSPC"),
    (OSError(errno.EIO, "I/O error", "/data/commitlog/0000"), False,
     ResponseCode.SYSTEM_ERROR, "(EIO); see the broker's log"),
])
def test_a_store_refusal_is_answered_without_the_stores_paths(
        error: Exception, resources: bool, code: int, words: str) -> None:
    flow, _ = start(request())
    answer = flow.append_failed(error, out_of_resources=resources)  # type: ignore[arg-type]
    assert answer.response.code == code and words in (answer.response.remark or "")
    assert "/data" not in (answer.response.remark or "")
