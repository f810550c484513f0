"""Transactional messages over inproc and TCP, with frames built by hand from RocketMQ's
protocol, under trio's ``MockClock``.

A half message is a SEND_MESSAGE_V2 whose properties carry ``TRAN_MSG`` and
``PGROUP`` and whose sysFlag is PREPARED (4), as ``DefaultMQProducerImpl``
sends it; END_TRANSACTION (37) carries ``EndTransactionRequestHeader``'s
fields. Producers send END_TRANSACTION oneway; the bad-input cases here ask
for an answer (flag 0) to read the refusal. An unknown transaction is
checked back with CHECK_TRANSACTION_STATE (39) on its producer group's
connection once ``transaction_time_out`` has passed, within one check
interval after (by the broker's clock), and ends as the answer says.
"""

from __future__ import annotations

import json
import struct

import trio
from broker_nodes import Cluster, wait_until
from test_delay_wire import stream_to
from test_pull_wire import PULL_MESSAGE, call, decode_messages, receive_exactly
from test_send_wire import properties

from triomq.broker.secondary.core.transaction import real_message

SEND_MESSAGE_V2, END_TRANSACTION, CHECK_TRANSACTION_STATE, HEART_BEAT = 310, 37, 39, 34
SUCCESS, SYSTEM_ERROR, NO_PERMISSION, SLAVE_NOT_AVAILABLE = 0, 1, 16, 11
INVALID_PARAMETER, PULL_NOT_FOUND, ILLEGAL_OPERATION = 29, 19, 604


def send_fields(body_properties: str, sys_flag: int, group: str = "tx-group",
                born_ms: int = 1700000000000) -> dict:
    return {"a": group, "b": "orders", "c": "TBW102", "d": "4", "e": "0", "f": str(sys_flag),
            "g": str(born_ms), "h": "0", "i": body_properties, "j": "0", "k": "false",
            "m": "false", "n": "broker-a"}


def half_properties(n: int, group: str = "tx-group") -> str:
    return (f"TRAN_MSG\x01true\x02PGROUP\x01{group}\x02"
            f"UNIQ_KEY\x01C0A80001000030390000000000000{n:03d}\x02")


def end_fields(answer: dict, commit_or_rollback: int, **changes: str) -> dict:
    """END_TRANSACTION for the half message a send ``answer`` placed."""
    ext = answer["extFields"]
    commit_log_offset = struct.unpack(">q", bytes.fromhex(ext["msgId"])[-8:])[0]
    fields = {"producerGroup": "tx-group", "tranStateTableOffset": ext["queueOffset"],
              "commitLogOffset": str(commit_log_offset),
              "commitOrRollback": str(commit_or_rollback), "fromTransactionCheck": "false",
              "msgId": ext["msgId"], "topic": "orders"}
    return {**fields, **changes}


def oneway_frame(code: int, opaque: int, ext_fields: dict) -> bytes:
    header = json.dumps({"code": code, "language": "JAVA", "version": 435, "opaque": opaque,
                         "flag": 2, "extFields": ext_fields}).encode()
    return struct.pack(">iI", 4 + len(header), len(header)) + header


async def pull_orders(stream, opaque: int) -> list[dict]:
    header, body = await call(stream, PULL_MESSAGE, opaque, {
        "consumerGroup": "cg", "topic": "orders", "queueId": "0", "queueOffset": "0",
        "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0",
        "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"})
    if header["code"] == PULL_NOT_FOUND:
        return []
    assert header["code"] == SUCCESS, header.get("remark")
    return decode_messages(body)


async def receive_request(stream: trio.abc.Stream) -> tuple[dict, bytes]:
    """The next frame the broker writes: its JSON header and its body."""
    (length,) = struct.unpack(">i", await receive_exactly(stream, 4))
    rest = await receive_exactly(stream, length)
    header_length = struct.unpack_from(">I", rest)[0] & 0xFFFFFF
    return json.loads(rest[4:4 + header_length]), rest[4 + header_length:]


async def test_a_half_message_is_hidden_until_committed_and_ends_once(
        tmp_path, kind, clock) -> None:
    cluster = Cluster(kind, tmp_path)
    async with cluster.broker("a") as a, stream_to(cluster, a) as stream:
        # A plain message first, so the real topic exists.
        plain, _ = await call(stream, SEND_MESSAGE_V2, 1, send_fields("", 0), b"plain")
        assert plain["code"] == SUCCESS, plain.get("remark")
        half, _ = await call(stream, SEND_MESSAGE_V2, 2,
                             send_fields(half_properties(1), 4), b"paid")
        assert half["code"] == SUCCESS, half.get("remark")
        assert half["extFields"]["queueId"] == "0"
        assert half["extFields"]["queueOffset"] == "0"  # the half queue's first
        assert [m["body"] for m in await pull_orders(stream, 3)] == [b"plain"]
        stored = [r for r in a.log.iter_records() if r.topic == "RMQ_SYS_TRANS_HALF_TOPIC"]
        assert len(stored) == 1 and stored[0].queue_id == 0 and stored[0].sys_flag & 0xC == 0
        assert {"REAL_TOPIC": "orders", "REAL_QID": "0", "TRAN_MSG": "true",
                "__transactionId__": "C0A80001000030390000000000000001"}.items() \
            <= stored[0].properties.items()

        answer, _ = await call(stream, END_TRANSACTION, 4, end_fields(half, 8))
        assert answer["code"] == SUCCESS, answer.get("remark")
        messages = await pull_orders(stream, 5)
        assert [m["body"] for m in messages] == [b"plain", b"paid"]
        committed = properties(messages[1]["properties"])
        assert committed["UNIQ_KEY"] == "C0A80001000030390000000000000001"
        assert "TRAN_MSG" not in committed and "REAL_TOPIC" not in committed
        assert messages[1]["sysFlag"] & 0xC == 8
        ops = [r for r in a.log.iter_records() if r.topic == "RMQ_SYS_TRANS_OP_HALF_TOPIC"]
        assert [(r.body, r.properties["TAGS"]) for r in ops] == [(b"0,", "d")]

        # Ended once: neither a second commit nor a rollback does anything.
        for opaque, how in ((6, 8), (7, 12)):
            again, _ = await call(stream, END_TRANSACTION, opaque, end_fields(half, how))
            assert again["code"] == ILLEGAL_OPERATION
            assert "already ended (commit)" in again["remark"]
        assert len(await pull_orders(stream, 8)) == 2

        # A rollback sent oneway, as producers send it: an op record, no message.
        second, _ = await call(stream, SEND_MESSAGE_V2, 9,
                               send_fields(half_properties(2), 4), b"cancelled")
        await stream.send_all(oneway_frame(END_TRANSACTION, 10, end_fields(second, 12)))
        await wait_until(lambda: a.log.queue_max_offset("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0) == 2)
        assert len(await pull_orders(stream, 11)) == 2
        # State unknown (0): nothing happens.
        third, _ = await call(stream, SEND_MESSAGE_V2, 12,
                              send_fields(half_properties(3), 4), b"pending")
        unknown, _ = await call(stream, END_TRANSACTION, 13, end_fields(third, 0))
        assert unknown["code"] == SUCCESS
        assert a.log.queue_max_offset("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0) == 2


async def test_bad_end_transactions_are_refused_and_store_nothing(tmp_path, kind,
                                                                  clock) -> None:
    cluster = Cluster(kind, tmp_path)
    async with cluster.broker("a") as a, stream_to(cluster, a) as stream:
        plain, _ = await call(stream, SEND_MESSAGE_V2, 1, send_fields("", 0), b"plain")
        half, _ = await call(stream, SEND_MESSAGE_V2, 2,
                             send_fields(half_properties(1), 4), b"paid")
        end = a.log.max_offset
        cases = [
            (end_fields(half, 8, commitLogOffset="999999"), SYSTEM_ERROR,
             "Find prepared transaction message failed"),
            (end_fields(plain, 8), SYSTEM_ERROR, "is not a half message (topic orders)"),
            (end_fields(half, 8, producerGroup="other"), SYSTEM_ERROR,
             "The producer group wrong"),
            (end_fields(half, 12, producerGroup="other", fromTransactionCheck="true"),
             SYSTEM_ERROR, "The producer group wrong"),
            (end_fields(half, 8, tranStateTableOffset="5"), SYSTEM_ERROR,
             "The transaction state table offset wrong"),
            (end_fields(half, 5), INVALID_PARAMETER, "'commitOrRollback'"),
            (end_fields(half, 8, commitLogOffset="-1"), INVALID_PARAMETER,
             "'commitLogOffset'"),
            ({"producerGroup": "tx-group"}, INVALID_PARAMETER, "missing"),
        ]
        for opaque, (fields, code, remark) in enumerate(cases, 3):
            answer, _ = await call(stream, END_TRANSACTION, opaque, fields)
            assert (answer["code"], remark in answer.get("remark", "")) == (code, True), \
                (fields, answer)
        assert a.log.max_offset == end
        assert [m["body"] for m in await pull_orders(stream, 20)] == [b"plain"]
        # The broker keeps serving: the right request still commits.
        answer, _ = await call(stream, END_TRANSACTION, 21, end_fields(half, 8))
        assert answer["code"] == SUCCESS
        assert [m["body"] for m in await pull_orders(stream, 22)] == [b"plain", b"paid"]


async def test_a_broker_rejecting_transactions_refuses_half_messages(tmp_path, kind,
                                                                     clock) -> None:
    cluster = Cluster(kind, tmp_path)
    async with cluster.broker("a", extra="reject_transaction_message = true") as a, \
            stream_to(cluster, a) as stream:
        answer, _ = await call(stream, SEND_MESSAGE_V2, 1,
                               send_fields(half_properties(1), 4), b"paid")
        assert answer["code"] == NO_PERMISSION
        # The broker's store host (127.0.0.1 over TCP).
        assert answer["remark"] == (f"the broker[{a.processor.store_host[0]}] sending "
                                    "transaction message is forbidden")
        assert a.log.max_offset == 0


async def test_only_a_master_ends_transactions(tmp_path, kind, clock) -> None:
    cluster = Cluster(kind, tmp_path)
    async with cluster.broker("a") as a, \
            cluster.broker("b", broker_id=1, master=a.ha_address) as b, \
            stream_to(cluster, b) as stream:
        fields = {"producerGroup": "tx-group", "tranStateTableOffset": "0",
                  "commitLogOffset": "0", "commitOrRollback": "8", "msgId": "x"}
        answer, _ = await call(stream, END_TRANSACTION, 1, fields)
        assert answer["code"] == SLAVE_NOT_AVAILABLE
        assert "not master" in answer["remark"]


async def test_a_restarted_master_knows_what_ended_and_where_its_check_was(
        tmp_path, kind, clock) -> None:
    cluster = Cluster(kind, tmp_path)
    # No producer is connected: each round counts a check in a copy and moves on.
    extra = "transaction_check_interval = 100\ntransaction_time_out = 1"
    half_topic, group = "RMQ_SYS_TRANS_HALF_TOPIC", "CID_SYS_RMQ_TRANS"
    async with cluster.broker("a", extra=extra) as a, stream_to(cluster, a) as stream:
        half, _ = await call(stream, SEND_MESSAGE_V2, 1,
                             send_fields(half_properties(1), 4), b"paid")
        await wait_until(lambda: (a.offsets.table.query(group, half_topic, 0) or 0) >= 1)
        progress = a.offsets.table.query(group, half_topic, 0)
    async with cluster.broker("a", extra=extra) as a, stream_to(cluster, a) as stream:
        # The check's progress came back from consumerOffset.json.
        assert a.offsets.table.query(group, half_topic, 0) >= progress
        answer, _ = await call(stream, END_TRANSACTION, 2, end_fields(half, 8))
        assert answer["code"] == SUCCESS, answer.get("remark")
        # A check's copy of it is the same transaction: already ended.
        copy = next(r for r in a.log.iter_records() if r.topic == half_topic
                    and r.properties.get("TRAN_PREPARED_QUEUE_OFFSET") == "0")
        answer, _ = await call(stream, END_TRANSACTION, 3, end_fields(
            half, 12, tranStateTableOffset=str(copy.queue_offset),
            commitLogOffset=str(copy.physical_offset), fromTransactionCheck="true"))
        assert answer["code"] == ILLEGAL_OPERATION, answer.get("remark")
        assert [m["body"] for m in await pull_orders(stream, 4)] == [b"paid"]
    async with cluster.broker("a", extra=extra) as a, stream_to(cluster, a) as stream:
        # A new term reads the op records again.
        answer, _ = await call(stream, END_TRANSACTION, 5, end_fields(half, 8))
        assert answer["code"] == ILLEGAL_OPERATION
        assert "already ended (ended)" in answer["remark"]
        assert [m["body"] for m in await pull_orders(stream, 6)] == [b"paid"]


async def test_a_commit_whose_op_record_was_lost_is_not_committed_again(
        tmp_path, kind, clock) -> None:
    cluster = Cluster(kind, tmp_path)
    async with cluster.broker("a") as a, stream_to(cluster, a) as stream:
        half, _ = await call(stream, SEND_MESSAGE_V2, 1,
                             send_fields(half_properties(1), 4), b"paid")
        stored = next(r for r in a.log.iter_records() if r.topic == "RMQ_SYS_TRANS_HALF_TOPIC")
        # The commit's message was stored, its op record not: the master went away
        # between the two puts.
        put = await a.processor.put_own(real_message(stored, 8))
        assert put.code == SUCCESS
        committed = next(r for r in a.log.iter_records() if r.topic == "orders")
        assert committed.prepared_transaction_offset == stored.physical_offset
    async with cluster.broker("a") as a, stream_to(cluster, a) as stream:
        for opaque, how in ((2, 8), (3, 12)):
            answer, _ = await call(stream, END_TRANSACTION, opaque, end_fields(half, how))
            assert answer["code"] == ILLEGAL_OPERATION
            assert "already ended (commit)" in answer["remark"]
        assert [m["body"] for m in await pull_orders(stream, 4)] == [b"paid"]


async def test_an_unknown_transaction_is_checked_back_after_its_time_out_then_ended(
        tmp_path, kind, clock) -> None:
    interval, time_out = 1000, 3000
    cluster = Cluster(kind, tmp_path)
    extra = f"transaction_check_interval = {interval}\ntransaction_time_out = {time_out}"
    async with cluster.broker("a", extra=extra) as a, stream_to(cluster, a) as stream:
        # The producer group's connection, as a producer's heartbeat names it.
        beat, _ = await call(stream, HEART_BEAT, 1, {}, json.dumps({
            "clientID": "producer@1", "consumerDataSet": [],
            "producerDataSet": [{"groupName": "tx-group"}]}).encode())
        assert beat["code"] == SUCCESS, beat.get("remark")
        born = a.clock()
        half, _ = await call(stream, SEND_MESSAGE_V2, 2,
                             send_fields(half_properties(1), 4, born_ms=born), b"paid")
        assert half["code"] == SUCCESS, half.get("remark")
        unknown, _ = await call(stream, END_TRANSACTION, 3, end_fields(half, 0))
        assert unknown["code"] == SUCCESS

        with trio.fail_after(60):
            check, body = await receive_request(stream)
        assert (check["code"], check["flag"] & 2) == (CHECK_TRANSACTION_STATE, 2)
        fields = check["extFields"]
        # Not before its time out, and in the first round after it: the copy the check
        # names was stored at its round (a mock-time jump while the frame crossed the
        # loopback would not move that).
        checked_at = a.log.read_record(int(fields["commitLogOffset"])).store_timestamp
        assert born + time_out <= checked_at <= born + time_out + interval
        assert fields["transactionId"] == "C0A80001000030390000000000000001"
        assert fields["bname"] == "broker-a"
        (message,) = decode_messages(body)
        assert (message["topic"], message["body"]) == ("orders", b"paid")
        assert properties(message["properties"])["TRANSACTION_CHECK_TIMES"] == "1"

        # The producer's answer ends it, as its check said: committed, once.
        commit = {**end_fields(half, 8), "tranStateTableOffset": fields["tranStateTableOffset"],
                  "commitLogOffset": fields["commitLogOffset"], "fromTransactionCheck": "true"}
        await stream.send_all(oneway_frame(END_TRANSACTION, 4, commit))
        await wait_until(lambda: a.log.queue_max_offset("orders", 0) == 1)
        assert [m["body"] for m in await pull_orders(stream, 5)] == [b"paid"]
        await trio.sleep(5 * interval / 1000)
        assert a.transactions is not None and a.transactions.checks_sent == 1
