"""Secondary messages: delayed deliveries, transactions and retries beside plain sends.

Run from the repository root::

    .venv/bin/python benchmarks/secondary.py [--count 1000000] [--levels 18] [--seconds 5]
    .venv/bin/python benchmarks/secondary.py --timer-only    # the timer wheel's ticks alone

The deployment is ``messaging.py``'s: a name server and a static group of
three replicas, each a ``python -m triomq.cli`` process, with the group
fsync and ``all_ack_in_sync_state_set = true``; 1 KiB bodies, 8 queues.

- **delayed messages due at once**: the group is started once (its topics
  created, a plain and a real delayed send stored, delivered and
  replicated) and stopped; then
  ``--count`` delayed messages are written into each replica's store
  offline, each through the broker's own put core (``PutFlow.start`` on a
  hand-built SEND_MESSAGE_V2 with ``DELAY``: the same rewrite a send gets,
  to ``SCHEDULE_TOPIC_XXXX`` with ``REAL_TOPIC``/``REAL_QID``) with a store
  time three hours back, so that every delivery time (the schedule queue's
  tags code) is past; the same records in the same order on the three
  replicas, as replication would have left them; the first is checked
  against the real delayed send's record. Their levels go round
  the first ``--levels`` of the default ``messageDelayLevel``. The group
  is then started again: the master's schedule service finds them all
  due. The rate is the messages delivered (the real topic's queues'
  GET_MAX_OFFSET, polled) between the first poll that sees one and the
  last one, over that time;
- **plain sends**, in the same processes afterwards: ``triomq.client``'s
  ``Producer``, one task at a time and 64 in flight, for ``--seconds``
  each (``messaging.py``'s loads);
- **timer messages**, in the same processes after the plain sends: 64
  tasks sending with ``TIMER_DELIVER_MS`` for ``--seconds``, every one due
  at the same time, ``TIMER_DUE_AFTER_S`` after the sends end (one wheel
  slot); then their delivery's rate, from the first one the topic's
  GET_MAX_OFFSET shows to the last;
- **transactional messages**: 64 tasks of a ``TransactionProducer`` each
  sending a half message and committing it (END_TRANSACTION, oneway), for
  ``--seconds``; the rate counts the commits, until the real topic holds
  them all;
- **retries**: 64 tasks each sending CONSUMER_SEND_MSG_BACK for a message
  the plain sends stored, for ``--seconds`` (each one a put into the
  schedule topic at the retry's delay level);
- **pop receive-and-ack against pull**: over the messages the plain sends
  stored, 64 tasks each popping one message (POP_MESSAGE, ``maxMsgNums`` 1,
  every queue, a 60 s invisible time: a checkpoint put into the revive
  topic) and acking it (ACK_MESSAGE: an ack put) for ``--seconds``, one
  round trip counting both; beside it, 64 tasks each pulling one message
  (PULL_MESSAGE, ``maxMsgNums`` 1, their own queue and offset, no commit).

Each row also gives the three brokers' CPU per message, and the CPU seconds
per second of the master and of this process (the clients).

- **timer messages: the cost per tick against the number pending**, in
  this process, first: the broker's own timer core (``TimerDelivery``,
  ``triomq.broker.secondary.core.timer_wheel``) fed by an in-memory timer
  queue of ``10^3`` to ``10^6`` pending messages, ``TIMER_DUE_PER_SLOT`` in
  each 1-s slot, all scanned before; then ``TIMER_TICKS`` ticks, each one
  slot later: the queue looked at (nothing new), the slot's chain read and
  delivered (each put answered PUT_OK at once), the checkpoint moved. It
  must be flat: a tick costs its slot, not the wheel; the "empty" column
  is a tick with nothing due.

``--profile DIR`` runs the restarted brokers under cProfile (DIR/<name>.prof).
Prints the machine line, then a Markdown table; BENCHMARKS.md's "Secondary
messages" section comes from it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import messaging
import trio
from messaging import (
    BODY,
    IN_FLIGHT,
    QUEUES,
    TOPIC,
    Processes,
    for_seconds,
    ready,
    replicas_caught_up,
    total_stored,
    until,
)

from triomq.broker.config import BrokerConfig
from triomq.broker.metadata import config_files
from triomq.broker.metadata.core.topic_table import TopicTable
from triomq.broker.metadata.topics import TOPICS_FILE
from triomq.broker.secondary.core.schedule_put import TIMER_TOPIC
from triomq.broker.secondary.core.timer_checkpoint import TimerCheckpoint
from triomq.broker.secondary.core.timer_wheel import (
    Deliver,
    ReadEntries,
    ReadRecord,
    TimerDelivery,
    WakeAt,
)
from triomq.broker.send.core.put_checks import BrokerState, PutSettings, host_port
from triomq.broker.send.core.put_flow import Append, PutFlow
from triomq.client.core.message import Message
from triomq.client.core.transaction import LocalTransactionState
from triomq.client.producer import Producer
from triomq.client.transaction_producer import TransactionProducer
from triomq.config import NodeConfig
from triomq.plugins.store_mmap import MmapCommitLog
from triomq.protocol.delay_levels import PROPERTY_REAL_TOPIC, SCHEDULE_TOPIC
from triomq.protocol.message import (
    PROPERTY_DELAY,
    PROPERTY_UNIQ_KEY,
    MessageRecord,
    properties_to_bytes,
)
from triomq.protocol.remoting import RemotingCommand
from triomq.protocol.unique_id import UniqueIdGenerator
from triomq.runtime import open_node
from triomq.settings import from_mapping

TX_TOPIC = "BenchTx"
TIMER_BENCH_TOPIC = "BenchTimer"
#: s after the timer sends end that they are all due, in one slot.
TIMER_DUE_AFTER_S = 3.0
SEND_MESSAGE_V2 = 310
CONSUMER_SEND_MSG_BACK = 36
PULL_MESSAGE, POP_MESSAGE, ACK_MESSAGE = 11, 200050, 200051
BROKERS = ("broker-0", "broker-1", "broker-2")
#: How far back the delayed messages were stored: past the longest default level (2 h).
STORED_AGO_MS = 3 * 3600 * 1000
#: Timer messages due in each slot of the tick benchmark, and the ticks timed.
TIMER_DUE_PER_SLOT = 10
TIMER_TICKS = 90
TIMER_PENDING = (10**3, 10**4, 10**5, 10**6)


# ------------------------------------------------------------ the timer wheel's ticks


def _timer_record(queue_offset: int, start_ms: int) -> MessageRecord:
    slot = start_ms + (queue_offset // TIMER_DUE_PER_SLOT) * 1000
    return MessageRecord(topic=TIMER_TOPIC, queue_id=0, body=BODY, properties={
        "TIMER_OUT_MS": str(slot), "REAL_TOPIC": TOPIC, "REAL_QID": "0",
        PROPERTY_UNIQ_KEY: f"u{queue_offset}"})


def _run_timer(flow: TimerDelivery, actions: list, count: int, start_ms: int,
               now_ms: int) -> object:
    """Do ``actions`` against an in-memory timer queue of ``count`` entries until the
    flow waits (records made when read: 10^6 of them would not fit in memory)."""
    while actions:
        action = actions.pop()
        if isinstance(action, ReadEntries):
            end = min(count, action.start + action.max_count)
            entries = [(q, q, 100, 0) for q in range(action.start, end)]
            actions += reversed(flow.entries_read(entries, 0, count, now_ms))
        elif isinstance(action, ReadRecord):
            record = _timer_record(action.physical_offset, start_ms)
            actions += reversed(flow.record_read(record, now_ms))
        elif isinstance(action, Deliver):
            actions += reversed(flow.put_done(action.queue_offset, True, now_ms))
        elif isinstance(action, WakeAt):
            return action
    raise AssertionError("the timer flow stopped without waiting")


def timer_tick_costs() -> list[tuple[int, float, float, float]]:
    """For each of ``TIMER_PENDING``: (pending, µs per tick delivering a slot, µs per
    empty tick, each the median of ``TIMER_TICKS``; s to scan them all in)."""
    rows = []
    for pending in TIMER_PENDING:
        start_ms = 1_700_000_000_000 + 10_000
        flow = TimerDelivery(1000, TimerCheckpoint())
        now = start_ms - 5000
        began = time.perf_counter()
        _run_timer(flow, flow.start(now), pending, start_ms, now)
        fill = time.perf_counter() - began
        assert flow.pending() == pending
        empties = []
        for _ in range(TIMER_TICKS):
            now += 10  # before the first slot's end: nothing due
            began = time.perf_counter()
            _run_timer(flow, flow.woke(now), pending, start_ms, now)
            empties.append(time.perf_counter() - began)
        now = start_ms + 1000  # the first slot has passed
        ticks = []
        for _ in range(TIMER_TICKS):
            began = time.perf_counter()
            _run_timer(flow, flow.woke(now), pending, start_ms, now)
            ticks.append(time.perf_counter() - began)
            now += 1000
        # The median: a tick is short, and the host's other loads are not.
        tick, empty = statistics.median(ticks), statistics.median(empties)
        assert flow.pending() == pending - TIMER_TICKS * TIMER_DUE_PER_SLOT
        rows.append((pending, tick * 1e6, empty * 1e6, fill))
        del flow
    return rows


def print_timer_ticks(rows: list[tuple[int, float, float, float]]) -> None:
    print(f"\n| timer messages pending | µs per tick delivering a slot of "
          f"{TIMER_DUE_PER_SLOT} (median) | µs per empty tick (median) | s to scan them in |")
    print("| ---: | ---: | ---: | ---: |")
    for pending, tick, empty, fill in rows:
        print(f"| {pending:,} | {tick:,.0f} | {empty:,.1f} | {fill:,.1f} |")


# ------------------------------------------------------------ the fixture


def delayed_send(i: int, levels: int, born_ms: int, ids: UniqueIdGenerator
                 ) -> RemotingCommand:
    """The ``i``-th delayed send: a SEND_MESSAGE_V2 of 1 KiB as ``Producer`` frames it
    (``SendMessageRequestHeaderV2``'s one-letter keys), its level ``1 + i % levels``."""
    properties = {PROPERTY_DELAY: str(1 + i % levels), PROPERTY_UNIQ_KEY: ids.next_id(born_ms)}
    return RemotingCommand.request(SEND_MESSAGE_V2, {
        "a": "bench-producer", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(i % QUEUES),
        "f": "0", "g": str(born_ms), "h": "0", "i": properties_to_bytes(properties).decode(),
        "j": "0", "n": "broker-a"}, BODY)


def fill_stores(root: Path, master: str, count: int, levels: int) -> float:
    """Write ``count`` delayed messages, all due, into each stopped replica's store; the
    seconds it took (with the ``sync`` after it)."""
    began = time.perf_counter()
    config = from_mapping(BrokerConfig, {"broker_name": "broker-a"})
    stores = [str(root / name) for name in BROKERS]
    table = config_files.load(stores[0], TOPICS_FILE, TopicTable.decode)
    assert table is not None and table.get(TOPIC) is not None, "the topic was created"
    store_host = host_port(master)
    state = BrokerState(broker_id=0, role="master", is_master=True, in_sync_replicas=3)
    stored_ms = time.time_ns() // 1_000_000 - STORED_AGO_MS
    client_ids = UniqueIdGenerator("127.0.0.1", os.getpid(), 1)
    broker_ids = UniqueIdGenerator(store_host[0], os.getpid(), 2)
    # The fixture needs no durability (the brokers read it from the page cache).
    with mock.patch("os.fdatasync", lambda fd: None), mock.patch("os.fsync", lambda fd: None):
        logs = [MmapCommitLog(store, message_delay_level=config.message_delay_level)
                for store in stores]
        settings = PutSettings(
            broker_name=config.broker_name, cluster_name=config.cluster_name,
            max_message_size=config.max_message_size,
            min_in_sync_replicas=config.min_in_sync_replicas,
            auto_create_topic_enable=config.auto_create_topic_enable,
            auto_create_topic_limit=config.auto_create_topic_limit,
            default_topic_queue_nums=config.default_topic_queue_nums,
            sync_flush_timeout=config.sync_flush_timeout, flush_policy="group",
            store_host=store_host, segment_size=logs[0].segment_size,
            max_delay_level=len(config.delay_levels))
        try:
            model = next(r for r in logs[0].iter_records() if r.topic == SCHEDULE_TOPIC)
            for i in range(count):
                flow = PutFlow(settings, now=0.0)
                action = flow.start(delayed_send(i, levels, stored_ms, client_ids),
                                    "127.0.0.1:50000", state, table, store_ms=stored_ms,
                                    new_id=broker_ids.next_id)
                assert isinstance(action, Append), action
                (record,) = action.records
                placed = {tuple(log.append(record)[:3]) for log in logs}
                assert len(placed) == 1, f"the replicas' logs differ at message {i}: {placed}"
                if i == 0:
                    same_as_a_put(logs[0], model, record)
        finally:
            for log in logs:
                log.close()
    # On disk before the group starts, as a broker's stored messages are: its first
    # fsyncs would write the fixture back otherwise.
    os.sync()
    return time.perf_counter() - began


def same_as_a_put(log: MmapCommitLog, model: MessageRecord, record: MessageRecord) -> None:
    """Check the first fixture record (level 1) against the real delayed send's."""
    def shape(r: MessageRecord) -> tuple:
        return (r.topic, r.queue_id, r.flag, r.sys_flag, r.reconsume_times, r.store_host,
                sorted(r.properties), {k: r.properties[k] for k in
                                       (PROPERTY_DELAY, PROPERTY_REAL_TOPIC, "CLUSTER")})

    model_entry, entry = log.queue_entries(SCHEDULE_TOPIC, 0, 0, 2)
    stored = log.read_record(entry.physical_offset)
    if (shape(model) != shape(stored)
            or model_entry.tags_code - model.store_timestamp
            != entry.tags_code - stored.store_timestamp):
        raise SystemExit(f"the fixture differs from a real delayed put:\n{model}\n{stored}")


# ------------------------------------------------------------ the group


def start_brokers(processes: Processes, root: Path, profile: Path | None) -> None:
    """Start the group's three brokers again from their config files."""
    for name in BROKERS:
        python = [sys.executable]
        if profile is not None:
            python += ["-m", "cProfile", "-o", str(profile / f"{name}.prof")]
        processes.start(name, [*python, "-m", "triomq.cli", "broker", "--config",
                               str(root / f"{name}.toml")], cwd=messaging.ROOT)


async def create_topic(node, master: str, namesrv: str, topic: str) -> None:
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES),
              "writeQueueNums": str(QUEUES), "perm": "6", "topicFilterType": "SINGLE_TAG",
              "topicSysFlag": "0", "order": "false"}
    await until(lambda: messaging.answered(node, f"tcp://{master}", messaging.CREATE_TOPIC,
                                           fields), f"creating topic {topic}")
    await until(lambda: messaging.answered(node, f"tcp://{namesrv}", 105,
                                           {"topic": topic}), f"the route of {topic}")


async def stored_in(node, master: str, topic: str) -> int:
    total = 0
    for queue in range(QUEUES):
        answer = await node.rpc.invoke(f"tcp://{master}", messaging.GET_MAX_OFFSET,
                                       {"topic": topic, "queueId": str(queue)})
        total += int(answer.ext_fields["offset"])
    return total


async def prepare(root: Path) -> tuple[str, list[str], int]:
    """Start the group, create the topics, store a plain and a delayed send, stop it once
    the slaves hold everything; its addresses and what the topic holds."""
    with Processes(root) as processes:
        namesrv, brokers = messaging.start_triomq(processes, root)
        async with open_node(client_config()) as node:
            await ready(node, brokers, namesrv)
            for topic in (TX_TOPIC, TIMER_BENCH_TOPIC):
                await create_topic(node, brokers[0], namesrv, topic)
            producer = Producer("bench-producer", namesrv_addr=[namesrv])
            async with producer.start(node.connect):
                await producer.send(Message(TOPIC, BODY))
                # A real delayed send (level 1: 1 s), the fixture's model; delivered here.
                await producer.send(Message(TOPIC, BODY, delay_time_level=1))
            await until(lambda: _holds(node, brokers[0], TOPIC, 2), "the delayed send")
            await until(lambda: replicas_caught_up(node, brokers), "the slaves catching up")
            base = await total_stored(node, brokers)
    return namesrv, brokers, base


def client_config() -> NodeConfig:
    return from_mapping(NodeConfig, {"name": "bench", "listen": "tcp://127.0.0.1:0",
                                     "log_level": "WARNING"})


class Meter:
    """The brokers' CPU from now on: per message, and how busy the master was."""

    def __init__(self, processes: Processes) -> None:
        self.processes = processes
        self.began = time.perf_counter()
        self.cpu = processes.cpu_seconds("broker-")
        self.master = processes.cpu_seconds("broker-0")
        self.own = time.process_time()

    def elapsed(self) -> float:
        return time.perf_counter() - self.began

    def results(self, key: str, messages: int) -> dict[str, float]:
        """``<key>_cpu``: µs of the three brokers' CPU per message; ``<key>_busy``: the
        master's CPU seconds per second; ``<key>_own``: this process's (the clients')."""
        return {f"{key}_cpu": (self.processes.cpu_seconds("broker-") - self.cpu) * 1e6
                / max(messages, 1),
                f"{key}_busy": (self.processes.cpu_seconds("broker-0") - self.master)
                / self.elapsed(),
                f"{key}_own": (time.process_time() - self.own) / self.elapsed()}


async def delivery(node, processes: Processes, master: str, target: int, count: int
                   ) -> dict[str, float]:
    """Poll the real topic until it holds ``target``; the delivery's rate and CPU."""
    began = time.perf_counter()
    first: tuple[float, int, Meter] | None = None
    with trio.fail_after(max(600.0, count / 100)):
        while True:
            try:
                stored = await total_stored(node, [master])
            except Exception:  # still starting
                await trio.sleep(0.05)
                continue
            now = time.perf_counter()
            if first is None and stored > target - count:
                first = now, stored, Meter(processes)
            if stored >= target:
                break
            await trio.sleep(0.2)
    assert first is not None
    if first[1] >= target:
        raise SystemExit(f"all {count:,} delivered before the first poll saw one: "
                         "a larger --count measures the delivery")
    seconds = now - first[0]
    delivered = target - first[1]
    return {"delayed": delivered / seconds,
            **first[2].results("delayed", delivered),
            "delayed_seconds": now - began, "delayed_first": first[0] - began}


async def plain_loads(producer: Producer, processes: Processes, seconds: float,
                      offsets: list[tuple[str, int]]) -> dict[str, float]:
    """One at a time and 64 in flight; keeps (msgId, commit-log offset) of what it sent."""
    sent = 0

    async def one() -> int:
        nonlocal sent
        result = await producer.send(Message(TOPIC, BODY))
        if len(offsets) < 100_000:
            offsets.append((result.msg_id, int(result.offset_msg_id[-16:], 16)))
        sent += 1
        return 1

    results: dict[str, float] = {}
    for key, tasks in (("one", 1), ("inflight", IN_FLIGHT)):
        sent, meter = 0, Meter(processes)
        results[key] = await for_seconds(seconds, tasks, one)
        results.update(meter.results(key, sent))
    return results


class Commit:
    async def execute_local_transaction(self, message, arg) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    async def check_local_transaction(self, message) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


async def transactions(node, processes: Processes, namesrv: str, master: str,
                       seconds: float) -> dict[str, float]:
    """Half send + commit from 64 tasks for ``seconds``; commits per second, counted
    until the topic holds every one."""
    producer = TransactionProducer("bench-tx", namesrv_addr=[namesrv],
                                   transaction_listener=Commit())
    sent = 0

    async def one() -> int:
        nonlocal sent
        result = await producer.send_message_in_transaction(Message(TX_TOPIC, BODY))
        assert result.local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
        sent += 1
        return 1

    async with producer.start(node.connect):
        await producer.send_message_in_transaction(Message(TX_TOPIC, BODY))
        await until(lambda: _holds(node, master, TX_TOPIC, 1), "the first commit")
        meter = Meter(processes)
        await for_seconds(seconds, IN_FLIGHT, one)
        await until(lambda: _holds(node, master, TX_TOPIC, 1 + sent), "the commits")
    return {"tx": sent / meter.elapsed(), **meter.results("tx", sent)}


async def timers(node, producer: Producer, processes: Processes, master: str,
                 seconds: float) -> dict[str, float]:
    """Timer sends from 64 tasks for ``seconds``, all due ``TIMER_DUE_AFTER_S`` after
    the last; then their delivery's rate, from the first delivered to the last."""
    due_ms = int((time.time() + seconds + TIMER_DUE_AFTER_S) * 1000)
    sent = 0

    async def one() -> int:
        nonlocal sent
        await producer.send(Message(TIMER_BENCH_TOPIC, BODY, deliver_time_ms=due_ms))
        sent += 1
        return 1

    meter = Meter(processes)
    results = {"timer_send": await for_seconds(seconds, IN_FLIGHT, one),
               **meter.results("timer_send", sent)}
    if time.time() * 1000 >= due_ms - 1000:
        raise SystemExit("the timer sends outlasted their delivery time: a longer "
                         "TIMER_DUE_AFTER_S measures the delivery")
    first: tuple[float, int, Meter] | None = None
    with trio.fail_after(max(600.0, sent / 100)):
        while (stored := await stored_in(node, master, TIMER_BENCH_TOPIC)) < sent:
            if first is None and stored > 0:
                first = time.perf_counter(), stored, Meter(processes)
            await trio.sleep(0.05)
    if first is None:
        raise SystemExit(f"all {sent:,} timer messages delivered before the first poll "
                         "saw one: a longer --seconds measures the delivery")
    delivered = sent - first[1]
    return {**results, "timer": delivered / (time.perf_counter() - first[0]),
            **first[2].results("timer", delivered), "timer_count": sent}


async def _holds(node, master: str, topic: str, count: int) -> bool:
    return await stored_in(node, master, topic) >= count


async def retries(node, processes: Processes, master: str, seconds: float,
                  offsets: list[tuple[str, int]]) -> dict[str, float]:
    """CONSUMER_SEND_MSG_BACK from 64 tasks for ``seconds``, each for a stored message."""
    sent = done = 0

    async def one() -> int:
        nonlocal sent, done
        msg_id, offset = offsets[sent % len(offsets)]
        sent += 1
        answer = await node.rpc.invoke(f"tcp://{master}", CONSUMER_SEND_MSG_BACK, {
            "offset": str(offset), "group": "bench-retry", "delayLevel": "0",
            "originMsgId": msg_id, "originTopic": TOPIC, "unitMode": "false",
            "maxReconsumeTimes": "16"})
        assert answer.code == 0, (answer.code, answer.remark)
        done += 1
        return 1

    meter = Meter(processes)
    rate = await for_seconds(seconds, IN_FLIGHT, one)
    return {"retry": rate, **meter.results("retry", done)}


async def pops(node, processes: Processes, master: str, seconds: float) -> dict[str, float]:
    """Pop + ack of one message from 64 tasks for ``seconds``, then pulls of one message
    from 64 tasks for as long."""
    address = f"tcp://{master}"
    pop_fields = {"consumerGroup": "bench-pop", "topic": TOPIC, "queueId": "-1",
                  "maxMsgNums": "1", "invisibleTime": "60000", "pollTime": "0",
                  "bornTime": "0", "initMode": "1"}
    popped = 0

    async def pop_and_ack() -> int:
        nonlocal popped
        answer = await node.rpc.invoke(address, POP_MESSAGE, pop_fields)
        if answer.code == 210:  # POLLING_TIMEOUT: every stored message popped
            return 0
        assert answer.code == 0, (answer.code, answer.remark)
        fields = answer.ext_fields
        kind, queue_id, start = fields["startOffsetInfo"].split(" ")
        offset = fields["msgOffsetInfo"].split(" ")[2]
        handle = " ".join([start, fields["popTime"], fields["invisibleTime"],
                           fields["reviveQid"], kind, "broker", queue_id, offset])
        acked = await node.rpc.invoke(address, ACK_MESSAGE, {
            "consumerGroup": "bench-pop", "topic": TOPIC, "queueId": queue_id,
            "offset": offset, "extraInfo": handle})
        assert acked.code == 0, (acked.code, acked.remark)
        popped += 1
        return 1

    meter = Meter(processes)
    results = {"pop": await for_seconds(seconds, IN_FLIGHT, pop_and_ack)}
    results.update(meter.results("pop", popped))
    pulled = 0

    async def pull() -> int:
        nonlocal pulled
        # Round the queues, over the first 100 messages of each (the plain sends stored
        # more): every pull finds its message.
        n, pulled = pulled, pulled + 1
        answer = await node.rpc.invoke(address, PULL_MESSAGE, {
            "consumerGroup": "bench-pull", "topic": TOPIC, "queueId": str(n % QUEUES),
            "queueOffset": str(n // QUEUES % 100), "maxMsgNums": "1", "sysFlag": "4",
            "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*",
            "subVersion": "0"})
        assert answer.code == 0, (answer.code, answer.remark)
        return 1

    meter = Meter(processes)
    results["pull"] = await for_seconds(seconds, IN_FLIGHT, pull)
    results.update(meter.results("pull", pulled))
    return results


async def run(args: argparse.Namespace, root: Path) -> dict[str, float]:
    namesrv, brokers, base = await prepare(root)
    print(f"the group stopped; filling three stores with {args.count:,} delayed messages",
          file=sys.stderr, flush=True)
    results = {"fill_seconds": fill_stores(root, brokers[0], args.count, args.levels)}
    print(f"filled in {results['fill_seconds']:.1f} s; starting the group again",
          file=sys.stderr, flush=True)
    with Processes(root) as processes:
        processes.start("namesrv", [sys.executable, "-m", "triomq.cli", "nameserver",
                                    "--config", str(root / "namesrv.toml")], cwd=messaging.ROOT)
        start_brokers(processes, root, args.profile)
        async with open_node(client_config()) as node:
            results.update(await delivery(node, processes, brokers[0], base + args.count,
                                          args.count))
            await until(lambda: messaging.answered(node, f"tcp://{namesrv}", 105,
                                                   {"topic": TOPIC}), f"the route of {TOPIC}")
            offsets: list[tuple[str, int]] = []
            producer = Producer("bench-producer", namesrv_addr=[namesrv])
            async with producer.start(node.connect):
                await producer.send(Message(TOPIC, BODY))
                results.update(await plain_loads(producer, processes, args.seconds, offsets))
                if not args.no_timer:
                    results.update(await timers(node, producer, processes, brokers[0],
                                                args.seconds))
            if not args.no_tx:
                results.update(await transactions(node, processes, namesrv, brokers[0],
                                                  args.seconds))
            if not args.no_retry:
                results.update(await retries(node, processes, brokers[0], args.seconds,
                                             offsets))
            if not args.no_pop:
                results.update(await pops(node, processes, brokers[0], args.seconds))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000,
                        help="delayed messages due at once (1,000,000)")
    parser.add_argument("--levels", type=int, default=18,
                        help="spread over the first N delay levels (18: all the default's)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per send load (5)")
    parser.add_argument("--no-tx", action="store_true", help="skip transactional messages")
    parser.add_argument("--no-retry", action="store_true", help="skip retries")
    parser.add_argument("--no-timer", action="store_true",
                        help="skip the timer sends and their delivery")
    parser.add_argument("--timer-only", action="store_true",
                        help="measure the timer wheel's ticks alone (no brokers)")
    parser.add_argument("--no-pop", action="store_true", help="skip pop and pull")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="run the restarted brokers under cProfile, writing "
                             "DIR/<name>.prof (read them with python -m pstats)")
    args = parser.parse_args()
    if not 1 <= args.levels <= 18:
        parser.error("--levels: 1 to 18")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, trio {trio.__version__}, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    print_timer_ticks(timer_tick_costs())
    if args.timer_only:
        return
    with tempfile.TemporaryDirectory(prefix="triomq-secondary-") as tmp:
        r = trio.run(run, args, Path(tmp) / "triomq")
    print(f"fixture: {args.count:,} delayed messages over {args.levels} level(s) written in "
          f"{r['fill_seconds']:.1f} s; first delivery seen {r['delayed_first']:.1f} s after "
          f"the start, the last {r['delayed_seconds']:.1f} s after it")
    spread = "in level 1" if args.levels == 1 else f"over {args.levels} levels"
    rows = [(f"delayed, {args.count:,} due at once {spread}: delivered", "delayed"),
            ("plain sends, one at a time", "one"),
            (f"plain sends, {IN_FLIGHT} in flight", "inflight"),
            (f"timer sends, {IN_FLIGHT} in flight (TIMER_DELIVER_MS)", "timer_send"),
            (f"timer, {r.get('timer_count', 0):,.0f} due in one slot: delivered", "timer"),
            (f"transactional, {IN_FLIGHT} in flight: half + commit", "tx"),
            (f"retries, {IN_FLIGHT} in flight: CONSUMER_SEND_MSG_BACK", "retry"),
            (f"pop receive-and-ack, {IN_FLIGHT} in flight: round trips", "pop"),
            (f"pulls of one message, {IN_FLIGHT} in flight", "pull")]
    inflight = r["inflight"]
    print("\n| 1 KiB messages | msgs/s | vs plain 64 in flight | brokers' CPU per message, "
          "µs | master's CPU busy | clients' CPU busy |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label, key in rows:
        if key in r:
            print(f"| {label} | {r[key]:,.0f} | {r[key] / inflight:.0%} | "
                  f"{r[key + '_cpu']:,.0f} | {r[key + '_busy']:.0%} | {r[key + '_own']:.0%} |")


if __name__ == "__main__":
    main()
