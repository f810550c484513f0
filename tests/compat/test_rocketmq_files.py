"""Files written by RocketMQ's own broker, read by triomq's tools.

RocketMQ 5.3.3's name server and broker (``rocketmq_server.py``, from their
Maven artifacts) take messages with tags, keys and properties from triomq's
producer (single sends and a batch, the commit log cut into 1 MiB segments
so that it spans several, each ended by RocketMQ's blank record), and a
triomq consumer group reads them all and commits its offsets; the broker is
then stopped cleanly. On the store it leaves, ``triomq store verify`` and
``dump``, the Spark source, the Parquet export, triomq's consume-queue and
index-file readers and its loaders of ``config/*.json`` are each held
against what was sent and what the broker answered; and a triomq broker opened
on a copy of that store serves its topic, offsets, messages and keys.

Skipped, with the reason, without ``java`` or ``mvn`` or where Maven could
not fetch the jars; with both but the jars not resolved (``make
rocketmq-server``, which ``make test`` runs), every test fails saying so.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from triomq.broker.config import BrokerConfig
from triomq.broker.consume.clients import load_subscription_groups
from triomq.broker.consume.offset_service import load_offsets
from triomq.broker.index.index_store import IndexStore
from triomq.broker.metadata.topics import load_topics
from triomq.client import Message, Producer, SendResult
from triomq.client.core.message import decode_messages
from triomq.config import NodeConfig
from triomq.plugins.store_mmap.consume_queue import ConsumeQueue, queue_dir
from triomq.protocol.commitlog_layout import CONSUMEQUEUE_DIR, tags_code
from triomq.protocol.message import body_crc
from triomq.settings import from_mapping
from triomq.testing.cluster import BROKER_NAME, free_tcp_port, open_cluster

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from compat_cluster import read_until
from rocketmq_server import CLASSPATH, RocketMQ, open_rocketmq, unavailable_server
from scenario_clients import (
    QUEUES,
    TOPIC,
    WAIT,
    consumer_offsets,
    create_topic,
    java_argv,
    require_java_build,
    unavailable_java,
    wait_routed,
)

from tests.spark.session import local_spark

pytestmark = [
    pytest.mark.skipif(unavailable_server() is not None, reason=str(unavailable_server())),
    pytest.mark.skipif(unavailable_java() is not None, reason=str(unavailable_java())),
    # The first test also bears the module's fixture: two JVMs' start and stop, a Java
    # client's run, some 260 sends.
    pytest.mark.timeout(600),
]

SINGLES = 240
BATCH = 8
SEGMENT = 1 << 20
CQ_ENTRIES = 50
GROUP = "files-reader"
#: How far a producer's clock and a broker's, in two processes of one host, may differ.
CLOCK_SKEW_MS = 10
QUERY_MESSAGE = 12
JAVA_SENDS = 4
JAVA_BODY = 6000
# sysFlag of a body RocketMQ 5's Java client compressed: COMPRESSED, and zlib as its type.
COMPRESSED_ZLIB = 0x1 | 3 << 8
# RocketMQ's defaults, which triomq's index reader must be told (they size the file).
INDEX_SLOTS = 5_000_000
INDEX_ENTRIES = 20_000_000


@attrs.frozen
class Sent:
    """One message sent, and where the broker said it stored it."""

    message: Message
    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    #: Sent by RocketMQ's Java client, which writes WAIT=true (triomq's leaves it out).
    java: bool = False

    @property
    def physical_offset(self) -> int:
        # An offset message id: the store host's IPv4 address and port, then the offset.
        return int(self.offset_msg_id[16:32], 16)


@attrs.frozen
class Written:
    """A store RocketMQ's broker wrote and stopped cleanly, and what went into it."""

    store: Path
    broker_address: str
    sent: list[Sent]

    def by_offset(self) -> dict[int, Sent]:
        return {s.physical_offset: s for s in self.sent}


def single(i: int) -> Message:
    # Bodies of up to 20 KB: the 1 MiB segments fill and RocketMQ ends each with a blank.
    return Message(TOPIC, f"m {i} ".encode() + bytes((i * 7 + n) % 256 for n in
                                                      range((i * 997) % 20_000)),
                   tags=f"Tag{'ABC'[i % 3]}", keys=(f"k-{i}", f"g-{i % 7}"),
                   properties={"seq": str(i), "note": "naïve ✓" if i % 5 == 0 else "plain"})


def batched(n: int) -> Message:
    return Message(TOPIC, f"b {n}".encode(), tags="TagB", keys=f"b-{n}",
                   properties={"seq": f"b{n}"})


def answered(messages: list[Message], result: SendResult) -> list[Sent]:
    ids = result.msg_id.split(",")
    offset_ids = result.offset_msg_id.split(",")
    assert len(ids) == len(offset_ids) == len(messages), result
    return [Sent(m, i, o, result.message_queue.queue_id, result.queue_offset + n)
            for n, (m, i, o) in enumerate(zip(messages, ids, offset_ids, strict=True))]


async def write_store(home: Path) -> Written:
    async with open_rocketmq(home, mappedFileSizeCommitLog=SEGMENT,
                             mappedFileSizeConsumeQueue=CQ_ENTRIES * 20) as rocketmq, \
            open_cluster(home / "triomq", transport="tcp", controllers=0, brokers=0) as cluster:
        app = await cluster.start("app")
        namesrv = "tcp://" + rocketmq.namesrv.address
        master = "tcp://" + rocketmq.broker.address
        await create_topic(app, master, namesrv, TOPIC, QUEUES)
        sent: list[Sent] = []
        async with Producer("files-producer", [namesrv]).start(app.connect) as producer:
            for i in range(SINGLES):
                message = single(i)
                sent += answered([message], await producer.send(message))
            batch = [batched(n) for n in range(BATCH)]
            sent += answered(batch, await producer.send_batch(batch))
        sent += await java_sends(home, rocketmq.namesrv.address)
        ids = {s.msg_id for s in sent}
        read = await read_until(app, [namesrv], lambda got: {m.msg_id for m in got} >= ids,
                                GROUP)
        assert sorted(m.msg_id for m in read) == sorted(ids)
        return await stopped(rocketmq, sent)


def java_message(mode: str, i: int) -> Message:
    """What the Java client's send scenario sends (``rocketmq_java``'s ``Main.message``)."""
    text = f"{mode} {i}"
    if len(text) < JAVA_BODY:
        text += " "
    text += "".join(chr(ord("a") + n % 26) for n in range(len(text), JAVA_BODY))
    return Message(TOPIC, text.encode(), tags=f"Tag{'ABC'[i % 3]}", keys=f"key-{mode}-{i}",
                   properties={"scenario": mode, "seq": str(i)})


async def java_sends(home: Path, namesrv: str) -> list[Sent]:
    """Sends by RocketMQ's Java client, their bodies over its 4 KiB compression threshold:
    it stores them compressed (zlib). Not a batch: RocketMQ's broker appends a batch's own
    properties, its UNIQ_KEY among them, to each of its messages (COMPATIBILITY.md)."""
    argv = java_argv("rocketmq-5", home / "java", "send", "--namesrv", namesrv, "--topic",
                     TOPIC, "--group", "java-files", "--count", str(JAVA_SENDS), "--modes",
                     "sync", "--body-bytes", str(JAVA_BODY))
    with trio.fail_after(WAIT):
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True,
                                      check=False)
    assert done.returncode == 0, done.stderr.decode()
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(line["i"], line["sendStatus"]) for line in lines] \
        == [(i, "SEND_OK") for i in range(JAVA_SENDS)]
    return [Sent(java_message("sync", line["i"]), line["msgId"], line["offsetMsgId"],
                 line["queueId"], line["queueOffset"], java=True) for line in lines]


async def stopped(rocketmq: RocketMQ, sent: list[Sent]) -> Written:
    await rocketmq.broker.stop()
    return Written(rocketmq.store, rocketmq.broker.address, sent)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    if not CLASSPATH.exists():
        pytest.fail(f"{CLASSPATH} is missing: run `make rocketmq-server` (`make test` runs "
                    f"it)", pytrace=False)
    require_java_build("rocketmq-5")
    # A synchronous fixture running its own trio loop: pytest-trio's fixtures are per test.
    return trio.run(write_store, tmp_path_factory.mktemp("rocketmq"))


@pytest.fixture(scope="session")
def spark() -> Any:
    with local_spark() as session:
        yield session


def triomq(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``triomq`` command, as installed beside this Python."""
    command = str(Path(sys.executable).with_name("triomq"))
    return subprocess.run([command, *args], capture_output=True, text=True, timeout=300,
                          check=False)


def expected_properties(s: Sent) -> dict[str, str]:
    """The properties RocketMQ's broker stores: the producer's but WAIT, and its own
    CLUSTER, MSG_REGION and TRACE_ON."""
    m = s.message
    return {**m.properties, "TAGS": m.tags or "", "KEYS": " ".join(m.keys),
            "UNIQ_KEY": s.msg_id, "CLUSTER": "DefaultCluster", "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true", **({"WAIT": "true"} if s.java else {})}


def test_store_verify_accepts_every_record_rocketmq_wrote(written: Written) -> None:
    done = triomq("store", "verify", str(written.store))
    assert done.returncode == 0, done.stderr
    end = log_end(written)
    assert end > 2 * SEGMENT
    assert done.stdout.strip() == f"ok: {len(written.sent)} records, data from 0 to {end} " \
                                  f"(mmap store)"


def log_end(written: Written) -> int:
    """Where the last record sent ends: every segment before its own ends in RocketMQ's
    blank record."""
    last = max(written.sent, key=lambda s: s.physical_offset)
    (record,) = dump(written, "--from", str(last.physical_offset))
    return last.physical_offset + int(record["size"])


def dump(written: Written, *args: str) -> list[dict[str, Any]]:
    done = triomq("store", "dump", "--json", str(written.store), *args)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_store_dump_prints_every_record_as_sent(written: Written) -> None:
    records = dump(written)
    by_offset = written.by_offset()
    assert sorted(r["physicalOffset"] for r in records) == sorted(by_offset)
    for r in records:
        s = by_offset[r["physicalOffset"]]
        body = base64.b64decode(r["body"])
        assert (r["topic"], r["queueId"], r["queueOffset"], body, r["properties"]) \
            == (TOPIC, s.queue_id, s.queue_offset, s.message.body, expected_properties(s))
        # The Java client's bodies are stored compressed with zlib (bodyCRC: the stored
        # bytes'), and read inflated; triomq's producer does not compress.
        assert r["sysFlag"] == (COMPRESSED_ZLIB if s.java else 0)
        if not s.java:
            assert r["bodyCRC"] == body_crc(s.message.body)
        # Born by the producer's clock (its run's EpochClock: the wall clock at its start
        # moved on by the monotonic clock), stored by the Java broker's wall clock: on one
        # host they agree within a few ms, not to the ms.
        assert 0 < r["bornTimestamp"] <= r["storeTimestamp"] + CLOCK_SKEW_MS
    # Its filters, on RocketMQ's records too.
    assert [r["properties"]["seq"] for r in dump(written, "--key", "g-3")] \
        == [str(i) for i in range(SINGLES) if i % 7 == 3]
    assert Counter(r["queueId"] for r in dump(written, "--queue", "2")) \
        == {2: sum(s.queue_id == 2 for s in written.sent)}


def expected_row(s: Sent, broker_address: str) -> tuple[Any, ...]:
    m = s.message
    return (s.physical_offset, TOPIC, s.queue_id, s.queue_offset, m.body, m.tags,
            " ".join(m.keys), expected_properties(s), broker_address)


def test_the_spark_source_reads_every_record_as_sent(written: Written, spark: Any) -> None:
    df = spark.read.format("triomq").option("maxBytesPerPartition", str(SEGMENT // 3)) \
        .load(str(written.store))
    rows = [(r.physicalOffset, r.topic, r.queueId, r.queueOffset, bytes(r.body), r.tags,
             r.keys, dict(r.properties), r.storeHost) for r in df.collect()]
    assert sorted(rows) == sorted(expected_row(s, written.broker_address)
                                  for s in written.sent)
    status = spark.read.format("triomq").option("table", "status") \
        .load(str(written.store)).collect()[0]
    end = log_end(written)
    # The log ends in zero fill (RocketMQ's last segment is mapped at its full size).
    assert (status.minOffset, status.maxOffset, status.segmentSize, status.segments,
            status.tail, status.tailReason) == (0, end, SEGMENT, end // SEGMENT + 1, "zero",
                                                None)


def test_the_parquet_export_holds_every_record_as_sent(written: Written,
                                                        tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "export"
    done = triomq("export", "parquet", str(written.store), str(out))
    assert done.returncode == 0, done.stderr
    assert f"exported {len(written.sent)} messages" in done.stdout
    table = pq.read_table(out / f"topic={TOPIC}")
    rows = [(r["physicalOffset"], TOPIC, r["queueId"], r["queueOffset"], r["body"], r["tags"],
             r["keys"], dict(r["properties"]), r["storeHost"]) for r in table.to_pylist()]
    assert sorted(rows) == sorted(expected_row(s, written.broker_address)
                                  for s in written.sent)


def queues_of(written: Written, queue: int) -> str:
    """The folder of the topic's consume queue ``queue``."""
    return queue_dir(str(written.store / CONSUMEQUEUE_DIR), TOPIC, queue)


def test_the_consume_queues_point_at_every_record(written: Written) -> None:
    sizes = {r["physicalOffset"]: r["size"] for r in dump(written)}
    for queue in range(QUEUES):
        mine = sorted((s for s in written.sent if s.queue_id == queue),
                      key=lambda s: s.queue_offset)
        cq = ConsumeQueue(queues_of(written, queue), CQ_ENTRIES, writable=False)
        try:
            assert (cq.min_offset, cq.max_offset) == (0, len(mine))
            assert [cq.get(n) for n in range(len(mine))] == [
                (s.physical_offset, sizes[s.physical_offset], tags_code(s.message.tags))
                for s in mine]
        finally:
            cq.close()
    # Several files per queue: entries span RocketMQ's 50-entry consume-queue files.
    assert any(len(os.listdir(queues_of(written, q))) > 1 for q in range(QUEUES))


def test_the_index_files_find_every_key(written: Written) -> None:
    index = IndexStore(str(written.store), INDEX_SLOTS, INDEX_ENTRIES)
    try:
        assert index.files(), "RocketMQ wrote no index file"
        keys: dict[str, set[int]] = {}
        for s in written.sent:
            for key in (*s.message.keys, s.msg_id):
                keys.setdefault(key, set()).add(s.physical_offset)
        for key, offsets in keys.items():
            found = index.query(f"{TOPIC}#{key}", 64, 0, 2**62)
            assert set(found.offsets) == offsets, key
    finally:
        index.close()


def test_the_config_files_load_with_the_topic_group_and_offsets(written: Written) -> None:
    root = str(written.store)
    topics = load_topics(root, BrokerConfig(), 0)
    topic = topics.get(TOPIC)
    assert topic is not None
    assert (topic.read_queue_nums, topic.write_queue_nums, topic.perm) == (QUEUES, QUEUES, 6)
    groups = load_subscription_groups(root, 0)
    assert groups.get(GROUP) is not None
    offsets = load_offsets(root, 500)
    ends = Counter(s.queue_id for s in written.sent)
    assert {q: offsets.query(GROUP, TOPIC, q) for q in range(QUEUES)} \
        == {q: ends[q] for q in range(QUEUES)}


async def test_a_triomq_broker_serves_the_store_rocketmqs_broker_left(
        written: Written, tmp_path: Path) -> None:
    # A copy (sparse: RocketMQ's index file is 400 MB of mostly holes) for the broker to own.
    store = tmp_path / "store"
    subprocess.run(["cp", "-r", "--sparse=always", str(written.store), str(store)], check=True)
    async with open_cluster(tmp_path, transport="tcp", controllers=0, brokers=0,
                            namesrvs=1) as cluster:
        await cluster.start_namesrvs()
        (names,) = cluster.namesrv_addresses.values()
        address = f"tcp://127.0.0.1:{free_tcp_port()}"
        await cluster.start("b0", from_mapping(NodeConfig, {
            "name": "b0", "role": "broker", "listen": address,
            "store": {"scheme": "mmap", "path": str(store),
                      "options": {"segment_size": SEGMENT, "cq_entries_per_file": CQ_ENTRIES}},
            "broker": {"broker_name": BROKER_NAME, "broker_id": 0, "ha_listen_port": 0,
                       "namesrv_addr": [names]}}))
        app = await cluster.start("app")
        # topics.json: the topic and its queues, registered and routed.
        await wait_routed(app, address, names, TOPIC, QUEUES)
        # consumerOffset.json: the group's committed offsets.
        ends = Counter(s.queue_id for s in written.sent)
        assert await consumer_offsets(app, address, GROUP) == {q: ends[q] for q in range(QUEUES)}
        # The consume queues and the log: every message, where RocketMQ's broker put it.
        by_id = {s.msg_id: s for s in written.sent}
        got = await read_until(app, [names], lambda got: {m.msg_id for m in got} >= by_id.keys(),
                               "triomq-after-rocketmq")
        assert sorted((m.msg_id, m.queue_id, m.queue_offset, m.body, m.tags, m.keys)
                      for m in got) == sorted(
            (s.msg_id, s.queue_id, s.queue_offset, s.message.body, s.message.tags,
             s.message.keys) for s in written.sent)
        # The index files: a key's messages.
        answer = await app.rpc.invoke(address, QUERY_MESSAGE, {
            "topic": TOPIC, "key": "g-3", "maxNum": "64", "beginTimestamp": "0",
            "endTimestamp": str(2**62)})
        assert answer.code == 0, answer.remark
        assert sorted(m.properties["seq"] for m in decode_messages(answer.body)) \
            == sorted(str(i) for i in range(SINGLES) if i % 7 == 3)
