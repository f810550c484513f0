"""Pop consumption over inproc and TCP, with frames built by hand from RocketMQ's remoting
layout (``PopMessageRequestHeader``, ``AckMessageRequestHeader``,
``ChangeInvisibleTimeRequestHeader``; receipt handles as ``ExtraInfoUtil`` writes them)
and trio's ``MockClock``: a popped message not acked comes back after its invisible time
through the group's pop retry topic, an acked one never does; bad input is refused with a
code and a remark and stores nothing."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from broker_nodes import Cluster
from test_pull_wire import decode_messages, receive_exactly
from test_send_wire import SEND_MESSAGE_V2, properties

from triomq.broker.core.escape_bridge import EscapeResult
from triomq.broker.service import Broker

POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME = 200050, 200051, 200053
BATCH_ACK_MESSAGE = 200151
REVIVE_TOPIC = "rmq_sys_REVIVE_LOG_DefaultCluster"
SUCCESS, INVALID_PARAMETER, NO_MESSAGE, POLLING_TIMEOUT = 0, 29, 208, 210
EXTRA = "revive_queue_num = 2\nrevive_interval = 500"


def frame(code: int, opaque: int, ext_fields: dict, body: bytes = b"") -> bytes:
    header = json.dumps({"code": code, "language": "JAVA", "version": 435, "opaque": opaque,
                         "flag": 0, "extFields": ext_fields}).encode()
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


class Wire:
    """A raw stream to the broker: one request at a time, answers read by hand."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.opaque = 0

    async def call(self, code: int, fields: dict, body: bytes = b"") -> tuple[dict, bytes]:
        self.opaque += 1
        await self.stream.send_all(frame(code, self.opaque, fields, body))
        (length,) = struct.unpack(">i", await receive_exactly(self.stream, 4))
        rest = await receive_exactly(self.stream, length)
        header_length = struct.unpack_from(">I", rest)[0] & 0xFFFFFF
        header = json.loads(rest[4:4 + header_length])
        assert header["opaque"] == self.opaque and header["flag"] & 1
        return header, rest[4 + header_length:]

    async def send(self, body: bytes, tags: str = "t") -> None:
        header, _ = await self.call(SEND_MESSAGE_V2, {
            "a": "pg", "b": "orders", "c": "TBW102", "d": "2", "e": "0", "f": "0",
            "g": "1700000000000", "h": "0", "i": f"TAGS\x01{tags}\x02", "j": "0", "k": "false"},
            body)
        assert header["code"] == SUCCESS, header.get("remark")

    async def pop(self, *, invisible: int = 10_000, poll: int = 0, queue_id: int = -1,
                  **more: str) -> tuple[dict, list[dict]]:
        header, body = await self.call(POP_MESSAGE, {
            "consumerGroup": "cg", "topic": "orders", "queueId": str(queue_id),
            "maxMsgNums": "32", "invisibleTime": str(invisible), "pollTime": str(poll),
            "bornTime": "1700000000000", "initMode": "1", "expType": "TAG", "exp": "*",
            "order": "false", **more})
        return header, decode_messages(body) if header["code"] == SUCCESS else []


@asynccontextmanager
async def broker_and_wire(kind: str, tmp_path) -> AsyncIterator[tuple[Broker, Wire]]:
    cluster = Cluster(kind, tmp_path)
    async with (cluster.broker("a", extra=EXTRA) as broker, cluster.client() as client,
                await client.connect(broker.node.address) as stream):
        yield broker, Wire(stream)


def replaced(fields: list[str], index: int, value: str) -> str:
    return " ".join([*fields[:index], value, *fields[index + 1:]])


def handle(ext: dict, message: dict) -> str:
    """A popped message's receipt handle, as RocketMQ's client builds it from the answer's
    ``startOffsetInfo`` (``kind queueId startOffset``; one queue here)."""
    kind, queue_id, start = ext["startOffsetInfo"].split(";")[0].split(" ")
    assert int(queue_id) == message["queueId"]
    return " ".join([start, ext["popTime"], ext["invisibleTime"], ext["reviveQid"], kind,
                     "broker-a", queue_id, str(message["queueOffset"])])


def batch_ack(ext: dict, bits: int = 1) -> dict:
    """A ``BatchAck`` as fastjson writes it: ``b`` is ``BitSet.toByteArray`` in base64."""
    kind, queue_id, start = ext["startOffsetInfo"].split(" ")
    raw = bits.to_bytes(max(1, (bits.bit_length() + 7) // 8), "little")
    return {"c": "cg", "t": "orders", "r": kind, "so": int(start), "q": int(queue_id),
            "rq": int(ext["reviveQid"]), "pt": int(ext["popTime"]),
            "it": int(ext["invisibleTime"]), "b": base64.b64encode(raw).decode()}


def ack_fields(topic: str, queue_id: int, offset: int, extra: str) -> dict:
    return {"consumerGroup": "cg", "topic": topic, "queueId": str(queue_id),
            "offset": str(offset), "extraInfo": extra}


def revive_records(broker: Broker) -> list:
    return [r for r in broker.log.iter_records() if r.topic == REVIVE_TOPIC]


async def test_an_unacked_pop_comes_back_after_its_invisible_time_an_acked_one_never(
        tmp_path, kind, clock) -> None:
    async with broker_and_wire(kind, tmp_path) as (a, wire):
        for body in (b"m0", b"m1", b"m2"):
            await wire.send(body)
        header, got = await wire.pop()
        assert (header["code"], header["remark"]) == (SUCCESS, "FOUND")
        ext = header["extFields"]
        assert [m["body"] for m in got] == [b"m0", b"m1", b"m2"]
        assert (ext["invisibleTime"], ext["restNum"]) == ("10000", "0")
        assert ext["startOffsetInfo"] == "0 0 0"
        assert ext["msgOffsetInfo"] == "0 0 0,1,2"
        assert ext["reviveQid"] in ("0", "1")
        assert all("POP_CK" not in properties(m["properties"]) for m in got)
        # The checkpoint, in RocketMQ's JSON, with this broker's name in its key.
        (ck,) = revive_records(a)
        assert ck.queue_id == int(ext["reviveQid"]) and ck.properties["TAGS"] == "ck"
        point = json.loads(ck.body)
        assert (point["t"], point["c"], point["q"], point["so"], point["d"], point["n"],
                point["bn"], point["pt"], point["it"]) == (
            "orders", "cg", 0, 0, [0, 1, 2], 3, "broker-a", int(ext["popTime"]), 10000)
        assert ck.properties["UNIQ_KEY"] == f"orders@0@0@cg@{ext['popTime']}@broker-a@ck"

        # Acks for m0 (RocketMQ 5's eight-field handle) and m2 (an older client's seven).
        header, _ = await wire.call(ACK_MESSAGE, ack_fields("orders", 0, 0,
                                                            handle(ext, got[0])))
        assert header["code"] == SUCCESS, header.get("remark")
        seven = handle(ext, got[2]).rsplit(" ", 1)[0]
        header, _ = await wire.call(ACK_MESSAGE, ack_fields("orders", 0, 2, seven))
        assert header["code"] == SUCCESS, header.get("remark")
        acks = [json.loads(r.body) for r in revive_records(a)[1:]]
        assert [(x["ao"], x["so"], x["bn"]) for x in acks] == [(0, 0, "broker-a"),
                                                               (2, 0, "broker-a")]
        # Nothing else to pop while they are invisible.
        header, got_now = await wire.pop()
        assert (header["code"], header["remark"], got_now) == (
            POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", [])

        # m1 comes back, from the group's pop retry topic, under its topic's name,
        # with its handle; a long-polling pop waits for it.
        again: list[dict] = []
        with trio.fail_after(60):
            while not again:
                header, again = await wire.pop(poll=5000)
        (m1,) = again
        props = properties(m1["properties"])
        assert (m1["body"], m1["topic"]) == (b"m1", "orders")
        retry_handle = props["POP_CK"].split(" ")
        assert retry_handle[4] == "1" and retry_handle[5] == "broker-a"
        assert props["1ST_POP_TIME"] == ext["popTime"]
        assert "%RETRY%cg_orders" in a.topics.table
        revive = a.topics.table.get(REVIVE_TOPIC)
        assert revive is not None and revive.read_queue_nums == 2
        header, _ = await wire.call(ACK_MESSAGE, ack_fields(
            "%RETRY%cg_orders", int(retry_handle[6]), int(retry_handle[7]),
            props["POP_CK"]))
        assert header["code"] == SUCCESS, header.get("remark")

        # Long after every invisible time: nothing more comes back.
        await trio.sleep(60)
        header, never = await wire.pop()
        assert (header["code"], never) == (POLLING_TIMEOUT, [])
        retried = [r for r in a.log.iter_records() if r.topic == "%RETRY%cg_orders"]
        assert [r.body for r in retried] == [b"m1"]
        assert retried[0].reconsume_times == 1
        # The revive offsets moved past every checkpoint done with.
        assert a.revive is not None
        assert all(not flow.pending for flow in a.revive.flows.values())
        done = [a.offsets.table.query("CID_RMQ_SYS_REVIVE_GROUP", REVIVE_TOPIC, q)
                for q in (0, 1)]
        assert max(d for d in done if d is not None) >= 0


async def test_a_changed_invisible_time_holds_the_message_back_longer(
        tmp_path, kind, clock) -> None:
    async with broker_and_wire(kind, tmp_path) as (a, wire):
        await wire.send(b"slow")
        header, (message,) = await wire.pop(invisible=3000)
        ext = header["extFields"]
        header, _ = await wire.call(CHANGE_MESSAGE_INVISIBLETIME, {
            **ack_fields("orders", 0, 0, handle(ext, message)), "invisibleTime": "60000"})
        assert header["code"] == SUCCESS, header.get("remark")
        changed = header["extFields"]
        assert changed["invisibleTime"] == "60000"
        assert changed["reviveQid"] == ext["reviveQid"]
        await trio.sleep(20)
        header, got = await wire.pop()
        assert (header["code"], got) == (POLLING_TIMEOUT, [])
        # The new handle, as RocketMQ's client makes it: the message's own offset.
        new = " ".join(["0", changed["popTime"], "60000", changed["reviveQid"], "0",
                        "broker-a", "0", "0"])
        header, _ = await wire.call(ACK_MESSAGE, ack_fields("orders", 0, 0, new))
        assert header["code"] == SUCCESS, header.get("remark")
        await trio.sleep(120)
        header, got = await wire.pop()
        assert (header["code"], got) == (POLLING_TIMEOUT, [])
        assert not [r for r in a.log.iter_records() if r.topic.startswith("%RETRY%")]


async def test_bad_pops_and_acks_are_refused_and_nothing_is_stored(
        tmp_path, kind, clock) -> None:
    async with broker_and_wire(kind, tmp_path) as (a, wire):
        await wire.send(b"x")
        header, _ = await wire.pop(invisible=-5)
        assert header["code"] == INVALID_PARAMETER
        assert "'invisibleTime'" in header["remark"] and "-5" in header["remark"]
        header, _ = await wire.pop(order="true")
        assert (header["code"], "orderly pop is not built" in header["remark"]) == (
            INVALID_PARAMETER, True)
        assert revive_records(a) == []

        header, (message,) = await wire.pop(invisible=5000)
        ext = header["extFields"]
        good = handle(ext, message)
        stored = len(revive_records(a))
        fields = good.split(" ")
        for extra, code, fragment in [
            ("garbage", INVALID_PARAMETER, "has 1 fields"),
            (replaced(fields, 4, "9"), INVALID_PARAMETER, "kind"),
            (replaced(fields, 3, "7"), INVALID_PARAMETER, "revive queue 7"),
            (replaced(fields, 1, str(int(fields[1]) + 999_999)), INVALID_PARAMETER,
             "in the future"),
            (replaced(fields, 7, "1"), INVALID_PARAMETER, "for offset 1"),
        ]:
            header, _ = await wire.call(ACK_MESSAGE, ack_fields("orders", 0, 0, extra))
            assert header["code"] == code, (extra, header)
            assert fragment in header["remark"] and "ACK_MESSAGE" in header["remark"]
        header, _ = await wire.call(ACK_MESSAGE, ack_fields("orders", 0, 5, good))
        assert (header["code"], "offset is illegal" in header["remark"]) == (
            NO_MESSAGE, True)
        header, _ = await wire.call(ACK_MESSAGE, ack_fields("%RETRY%cg_orders", 0, 0, good))
        assert header["code"] == 17  # TOPIC_NOT_EXIST: no retry topic yet
        header, _ = await wire.call(BATCH_ACK_MESSAGE, {}, b'{"acks":[]}')
        assert (header["code"], "no ack" in header["remark"]) == (NO_MESSAGE, True)
        for ack, fragment in [({**batch_ack(ext), "b": "!!"}, "not base64"),
                              ({**batch_ack(ext), "rq": 7}, "revive queue 7"),
                              ({**batch_ack(ext), "r": "x"}, "'r'")]:
            header, _ = await wire.call(BATCH_ACK_MESSAGE, {}, json.dumps(
                {"brokerName": "broker-a", "acks": [batch_ack(ext), ack]}).encode())
            assert header["code"] == INVALID_PARAMETER, header
            assert "ack 1" in header["remark"] and fragment in header["remark"]
        assert len(revive_records(a)) == stored

        # Stale: the invisible time ran out.
        await trio.sleep(5)
        header, _ = await wire.call(ACK_MESSAGE, ack_fields("orders", 0, 0, good))
        assert (header["code"], "expired" in header["remark"]) == (NO_MESSAGE, True)
        header, _ = await wire.call(CHANGE_MESSAGE_INVISIBLETIME, {
            **ack_fields("orders", 0, 0, good), "invisibleTime": "1000"})
        assert (header["code"], "expired" in header["remark"]) == (NO_MESSAGE, True)
        assert len(revive_records(a)) == stored
        # The broker keeps serving: the message comes back.
        again: list[dict] = []
        with trio.fail_after(60):
            while not again:
                header, again = await wire.pop(poll=5000)
        assert [m["body"] for m in again] == [b"x"]



async def test_a_batch_ack_acks_several_messages_at_once(tmp_path, kind, clock) -> None:
    async with broker_and_wire(kind, tmp_path) as (a, wire):
        for body in (b"m0", b"m1", b"m2"):
            await wire.send(body)
        header, _ = await wire.pop()
        ext = header["extFields"]
        # Offsets 0 and 2 (bits 0 and 2 of the BitSet), in fastjson's long names too.
        long_names = {"consumerGroup": "cg", "topic": "orders", "retry": "0",
                      "startOffset": 0, "queueId": 0, "reviveQueueId": int(ext["reviveQid"]),
                      "popTime": int(ext["popTime"]), "invisibleTime": 10000,
                      "bitSet": base64.b64encode(bytes([0b100])).decode()}
        header, _ = await wire.call(BATCH_ACK_MESSAGE, {}, json.dumps(
            {"brokerName": "broker-a", "acks": [batch_ack(ext, 0b1), long_names]}).encode())
        assert header["code"] == SUCCESS, header.get("remark")
        acks = [r for r in revive_records(a) if r.properties["TAGS"] == "bAck"]
        assert [json.loads(r.body)["aol"] for r in acks] == [[0], [2]]
        again: list[dict] = []
        with trio.fail_after(60):
            while not again:
                header, again = await wire.pop(poll=5000)
        assert [m["body"] for m in again] == [b"m1"]


async def test_a_long_polling_pop_is_answered_when_a_message_lands(
        tmp_path, kind, clock) -> None:
    async with broker_and_wire(kind, tmp_path) as (a, wire):
        await wire.send(b"first")  # the topic exists; the group's first pop starts here
        header, got = await wire.pop()
        assert [m["body"] for m in got] == [b"first"]
        async with trio.open_nursery() as nursery:
            answers: list = []

            async def waiting_pop() -> None:
                answers.append(await wire.pop(poll=30_000))

            nursery.start_soon(waiting_pop)
            await trio.sleep(10)  # held, with nothing to pop
            assert answers == []
            async with await a.node.connect(a.node.address) as other:
                await Wire(other).send(b"later")
        ((header, got),) = answers
        assert header["code"] == SUCCESS and [m["body"] for m in got] == [b"later"]


async def test_a_slave_refuses_pops_and_acks(tmp_path, clock) -> None:
    cluster = Cluster("inproc", tmp_path)
    async with (cluster.broker("a", extra=EXTRA) as a,
                cluster.broker("b", broker_id=1, master=a.ha_address, extra=EXTRA) as b,
                cluster.client() as client,
                await client.connect(b.node.address) as stream):
        wire = Wire(stream)
        header, _ = await wire.pop()
        assert header["code"] == 14 and "not master" in header["remark"]
        header, _ = await wire.call(ACK_MESSAGE, ack_fields("orders", 0, 0, "0 1 1 0 0 b 0 0"))
        assert header["code"] == 14 and "ACK_MESSAGE" in header["remark"]
        assert revive_records(b) == []


class Refusing:
    """An escape bridge that refuses every put, as a master stepping down does."""

    async def put_message(self, message) -> EscapeResult:
        return EscapeResult(code=14, remark="refused for the test")


async def test_a_checkpoint_not_stored_pops_nothing_and_leaves_the_message(
        tmp_path, kind, clock) -> None:
    async with broker_and_wire(kind, tmp_path) as (a, wire):
        await wire.send(b"kept")
        assert a.pops is not None
        bridge, a.pops.bridge = a.pops.bridge, Refusing()
        header, got = await wire.pop()
        assert (header["code"], got) == (POLLING_TIMEOUT, [])
        assert revive_records(a) == []
        assert a.offsets.table.query("cg", "orders", 0) == 0
        a.pops.bridge = bridge
        header, got = await wire.pop()
        assert [m["body"] for m in got] == [b"kept"]
