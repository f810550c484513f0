"""ali-ons, Alibaba's Node.js RocketMQ client, run unchanged against triomq.

Given a name server (``nameSrv``), ali-ons speaks open-source RocketMQ's
remoting protocol. Its producer and push consumer run as node processes
(``ali_ons/produce.js`` and ``ali_ons/consume.js``, which print a JSON line
per message sent or consumed) against a name server and a broker group over
real TCP; what they print is held against what was sent, and against what
triomq's own client and admin commands see.

Skipped without ``node`` on PATH. With node but without the pinned client
installed (``make ali-ons``, which ``make test`` runs), every test fails
saying so.
"""

from __future__ import annotations

import io
import itertools
import json
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from triomq.cli import build_parser
from triomq.client import ConsumeFromWhere, LitePullConsumer, Message, Producer
from triomq.plugin_manager import PluginManager
from triomq.plugins.client_cli.progress import consumer_progress
from triomq.testing.cluster import open_cluster

# The client tests' name server and broker groups, and the acting-master tests' static ones.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "acting_master"))
from acting_nodes import Groups as StaticGroups
from acting_nodes import acting_namesrv, create_topic, route, wait_for
from client_cluster import Groups, open_groups

SCRIPTS = Path(__file__).resolve().parent / "ali_ons"
NODE = shutil.which("node")
TOPIC = "ali-topic"
QUEUES = {("broker-a", n) for n in range(4)}
# Generous: node starting on a busy two-core CI machine may take seconds alone.
WAIT = 120
_RUNS = itertools.count()

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not on PATH: ali-ons is a "
                                                     "Node.js client")


@pytest.fixture(autouse=True)
def ali_ons_installed() -> None:
    if not (SCRIPTS / "node_modules" / "ali-ons").is_dir():
        pytest.fail(f"ali-ons is not installed in {SCRIPTS}/node_modules: run `make ali-ons` "
                    f"(`make test` runs it)", pytrace=False)


@pytest.fixture
async def groups(tmp_path: Path) -> AsyncIterator[Groups]:
    async with open_groups(tmp_path, "tcp") as harness:
        await harness.create_topic(TOPIC, queues=len(QUEUES))
        yield harness


def namesrv(groups: Groups) -> str:
    """The name server's ``host:port``, as ali-ons takes it."""
    (address,) = groups.namesrv
    return address.removeprefix("tcp://")


async def produce(groups: Groups, count: int, *, tags: str = "TagA", keys: str = "key-{i}",
                  body: str = "body {i}", delay_level: int = 0) -> list[dict[str, Any]]:
    """What produce.js sent and the broker answered, a dict per message."""
    argv = [NODE, "produce.js", "--namesrv", namesrv(groups), "--topic", TOPIC,
            "--group", "ali-producer", "--count", str(count), "--tags", tags,
            "--keys", keys, "--body", body, "--delay-level", str(delay_level)]
    with trio.fail_after(WAIT):
        done = await trio.run_process(argv, cwd=SCRIPTS, capture_stdout=True,
                                      capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return [json.loads(line) for line in done.stdout.splitlines()]


class Consumer:
    """A running consume.js: what it printed so far."""

    def __init__(self, process: trio.Process, stderr: Path) -> None:
        self.process = process
        self.stderr = stderr
        self.messages: list[dict[str, Any]] = []
        #: The topic's queues it pulls, as of the last rebalance that changed them.
        self.queues: set[tuple[str, int]] = set()
        self._pending = b""

    async def until(self, condition: Callable[[], bool]) -> None:
        """Read what it prints until ``condition()`` holds."""
        assert self.process.stdout is not None
        with trio.fail_after(WAIT):
            while not condition():
                while b"\n" not in self._pending:
                    chunk = await self.process.stdout.receive_some()
                    assert chunk, f"consume.js exited early: {self.stderr.read_text()}"
                    self._pending += chunk
                line, self._pending = self._pending.split(b"\n", 1)
                printed = json.loads(line)
                if "queues" in printed:
                    self.queues = {(q["brokerName"], q["queueId"]) for q in printed["queues"]}
                else:
                    self.messages.append(printed)

    async def receive(self, count: int) -> None:
        """Read what it prints until it has consumed ``count`` messages."""
        await self.until(lambda: len(self.messages) >= count)


@asynccontextmanager
async def consuming(groups: Groups, group: str, *, count: int | None = None, expression: str = "*",
                    broadcast: bool = False, rebalance_ms: int = 10_000, fail_times: int = 0
                    ) -> AsyncIterator[Consumer]:
    """consume.js in ``group`` until the block ends (it stops earlier after ``count``
    messages): its stdin is closed then, and it stores its offsets and leaves. Its
    handler fails a message consumed fewer than ``fail_times`` times before."""
    argv = [NODE, "consume.js", "--namesrv", namesrv(groups), "--topic", TOPIC,
            "--group", group, "--expression", expression, "--rebalance-ms", str(rebalance_ms),
            "--fail-times", str(fail_times)]
    argv += (["--count", str(count)] if count is not None else []) \
        + (["--broadcast"] if broadcast else [])
    stderr = groups.cluster.root / f"consume-{group}-{next(_RUNS)}.stderr"
    async with trio.open_nursery() as nursery:
        with stderr.open("wb") as errors:
            process = await nursery.start(partial(
                trio.run_process, argv, cwd=SCRIPTS, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=errors, check=False))
        yield Consumer(process, stderr)
        await process.stdin.aclose()
        with trio.fail_after(WAIT):
            await process.wait()
    assert process.returncode == 0, stderr.read_text()


async def consumer_offsets(groups: Groups, group: str) -> dict[int, int]:
    """``triomq admin consumer-progress``'s consumer offset of each queue of the topic."""
    app = groups.cluster.node("app") if "app" in groups.cluster.running \
        else await groups.client("app")
    args = build_parser(PluginManager.discover()).parse_args(
        ["admin", "consumer-progress", "-n", namesrv(groups), "-g", group, "-t", TOPIC,
         "--json"])
    out = io.StringIO()
    assert await consumer_progress(args, app, out) == 0
    return {row["queueId"]: row["consumerOffset"]
            for row in json.loads(out.getvalue())["offsetTable"]}


async def offsets_become(groups: Groups, group: str, expected: dict[int, int]) -> None:
    """Wait until the group's stored offsets are ``expected`` (ali-ons stores them with
    one-way requests: the broker may still be reading them when the consumer is gone)."""
    offsets = None
    with trio.move_on_after(WAIT):
        while (offsets := await consumer_offsets(groups, group)) != expected:
            await trio.sleep(0.05)
    assert offsets == expected


def as_sent(message: dict[str, Any]) -> tuple[Any, ...]:
    return (message["msgId"], message["body"], message["tags"], message["keys"],
            message["brokerName"], message["queueId"], message["queueOffset"])


async def test_a_group_consumes_what_ali_ons_sent_and_resumes_from_its_offsets(groups) -> None:
    sent = await produce(groups, 8, tags="TagA,TagB", keys="order-{i}", body="hello {i}")
    assert [s["sendStatus"] for s in sent] == ["SEND_OK"] * 8
    assert all(re.fullmatch("[0-9A-F]{32}", s["msgId"]) for s in sent)
    assert len({s["msgId"] for s in sent}) == 8
    per_queue = {n: [s["queueOffset"] for s in sent if s["queueId"] == n] for n in range(4)}
    assert all(offsets == list(range(len(offsets))) for offsets in per_queue.values())

    async with consuming(groups, "ali-group", count=8) as consumer:
        await consumer.receive(8)
    assert sorted(map(as_sent, consumer.messages)) == sorted(map(as_sent, sent))
    # ali-ons stored its offsets on the broker: triomq's admin command shows them.
    await offsets_become(groups, "ali-group", {n: len(o) for n, o in per_queue.items()})

    # A new member of the group starts where the offsets say: it gets only what is new.
    more = await produce(groups, 2, keys="later-{i}", body="later {i}")
    async with consuming(groups, "ali-group", count=2) as consumer:
        await consumer.receive(2)
    assert sorted(map(as_sent, consumer.messages)) == sorted(map(as_sent, more))


async def test_triomq_and_ali_ons_read_what_the_other_sent(groups) -> None:
    app = await groups.client("app")
    async with Producer("triomq-producer", groups.namesrv).start(app.connect) as producer:
        results = [await producer.send(Message(TOPIC, f"from triomq {i}".encode(),
                                               tags="TagT", keys=f"t-{i}")) for i in range(4)]
    async with consuming(groups, "ali-reader", count=4) as consumer:
        await consumer.receive(4)
    # ali-ons names a message by where it is stored: triomq's offset message id.
    assert sorted((m["msgId"], m["body"], m["tags"], m["keys"]) for m in consumer.messages) \
        == sorted((r.offset_msg_id, f"from triomq {i}", "TagT", f"t-{i}")
                  for i, r in enumerate(results))

    # ali-ons deflates bodies from 4 KiB on: triomq's consumer inflates them.
    sent = await produce(groups, 3, tags="TagN", keys="n-{i}", body="x" * 5000 + " {i}")
    reader = LitePullConsumer("triomq-reader", groups.namesrv,
                              consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
    reader.subscribe(TOPIC, "TagN")
    got = []
    async with reader.start(app.connect):
        with trio.fail_after(WAIT):
            while len(got) < 3:
                got += await reader.poll(timeout=1)
    assert sorted((m.offset_msg_id, m.body.decode(), m.tags, m.keys) for m in got) \
        == sorted((s["msgId"], s["body"], "TagN", (s["keys"],)) for s in sent)
    # ali-ons sets no UNIQ_KEY: the broker made one, as RocketMQ 5's does, and a consumer
    # names the message by it.
    assert all(re.fullmatch("[0-9A-F]{32}", m.msg_id) and m.msg_id != m.offset_msg_id
               for m in got)


async def test_a_tag_expression_keeps_only_its_tags(groups) -> None:
    sent = await produce(groups, 9, tags="TagA,TagB,TagC")
    async with consuming(groups, "ali-tags", count=6, expression="TagA || TagB") as consumer:
        await consumer.receive(6)
    assert sorted(map(as_sent, consumer.messages)) \
        == sorted(as_sent(s) for s in sent if s["tags"] != "TagC")


async def test_two_consumers_of_a_group_share_the_queues(groups) -> None:
    # ali-ons rebalances on its own timer only: it ignores NOTIFY_CONSUMER_IDS_CHANGED.
    async with consuming(groups, "ali-shared", rebalance_ms=300) as first:
        await first.until(lambda: first.queues == QUEUES)
        async with consuming(groups, "ali-shared", rebalance_ms=300) as second:
            await second.until(lambda: len(second.queues) == 2)
            await first.until(lambda: first.queues == QUEUES - second.queues)

            sent = await produce(groups, 8)
            mine = {c: [s for s in sent if (s["brokerName"], s["queueId"]) in c.queues]
                    for c in (first, second)}
            for consumer, expected in mine.items():
                await consumer.receive(len(expected))
                assert sorted(map(as_sent, consumer.messages)) == sorted(map(as_sent, expected))
    assert mine[first] and mine[second]


async def test_broadcast_consumers_each_receive_every_message(groups) -> None:
    sent = await produce(groups, 4)
    async with consuming(groups, "ali-broadcast", count=4, broadcast=True) as one, \
            consuming(groups, "ali-broadcast", count=4, broadcast=True) as two:
        for consumer in (one, two):
            await consumer.receive(4)
            assert sorted(map(as_sent, consumer.messages)) == sorted(map(as_sent, sent))


#: Short delay levels, so that a delayed send and a consumer's retries (level 3 +
#: reconsumeTimes) come due within the test.
SHORT_LEVELS = "200ms 1s 300ms 400ms 500ms"


@pytest.fixture
async def short_levels(tmp_path: Path) -> AsyncIterator[Groups]:
    async with open_groups(tmp_path, "tcp", broker={"message_delay_level": SHORT_LEVELS}
                           ) as harness:
        await harness.create_topic(TOPIC, queues=len(QUEUES))
        yield harness


async def test_a_delayed_message_ali_ons_sent_is_consumed_after_its_level(short_levels) -> None:
    groups = short_levels
    (sent,) = await produce(groups, 1, delay_level=2, body="later")
    assert sent["sendStatus"] == "SEND_OK"
    broker = groups.cluster.broker("a")
    (waiting,) = [r for r in broker.log.iter_records() if r.topic == "SCHEDULE_TOPIC_XXXX"]
    assert (waiting.properties["REAL_TOPIC"], waiting.properties["DELAY"]) == (TOPIC, "2")
    async with consuming(groups, "ali-delayed", count=1) as consumer:
        await consumer.receive(1)
    (got,) = consumer.messages
    assert (got["body"], got["reconsumeTimes"]) == ("later", 0)
    (delivered,) = [r for r in broker.log.iter_records() if r.topic == TOPIC]
    # Level 2 is 1 s: not stored on its topic before that.
    assert delivered.store_timestamp - waiting.store_timestamp >= 1000


async def test_ali_ons_retries_what_its_handler_failed_through_the_retry_topic(
        short_levels) -> None:
    groups = short_levels
    (sent,) = await produce(groups, 1, body="flaky")
    async with consuming(groups, "ali-retry", count=1, fail_times=2) as consumer:
        await consumer.receive(3)
    # Failed twice (each sent back with CONSUMER_SEND_MSG_BACK), consumed the third time.
    assert [(m["body"], m["failed"], m["reconsumeTimes"]) for m in consumer.messages] == [
        ("flaky", True, 0), ("flaky", True, 1), ("flaky", False, 2)]
    broker = groups.cluster.broker("a")
    retries = [r for r in broker.log.iter_records() if r.topic == "%RETRY%ali-retry"]
    assert len(retries) == 2
    assert all(r.properties["ORIGIN_MESSAGE_ID"] == sent["msgId"] for r in retries)
    assert [r.reconsume_times for r in retries] == [1, 2]


class ActingCluster:
    """A name server that supports acting masters and static groups broker-a (a0, a1) and
    broker-b (b0), in the shape ``produce`` and ``consuming`` take."""

    def __init__(self, cluster: Any, namesrv_address: str) -> None:
        self.cluster = cluster
        self.namesrv = [namesrv_address]


async def test_ali_ons_follows_an_acting_slave_while_its_master_is_gone(tmp_path) -> None:
    async with open_cluster(tmp_path, transport="tcp", controllers=0, brokers=0,
                            namesrvs=1) as cluster:
        acting_namesrv(cluster)
        (address,) = cluster.namesrv_addresses.values()
        await cluster.start_namesrvs()
        static = StaticGroups(cluster)
        for name in ("a0", "a1", "b0"):
            await static.start(name)
        client = await cluster.start("app")
        for name in ("a0", "b0"):
            await create_topic(client, cluster.node(name).address, TOPIC, queues=4)

        async def routes(check: Callable[[dict], bool]) -> None:
            async def holds() -> bool:
                return check(await route(client, address, TOPIC))
            await wait_for(holds)

        def by_group(data: dict) -> dict[str, tuple[int, str | None]]:
            perms = {q["brokerName"]: q["perm"] for q in data["queueDatas"]}
            return {b["brokerName"]: (perms[b["brokerName"]], b["brokerAddrs"].get("0"))
                    for b in data["brokerDatas"]}

        await routes(lambda data: len(data["brokerDatas"]) == 2)
        acting = ActingCluster(cluster, address)
        before = await produce(acting, 16, body="before {i}")
        on_a = [s for s in before if s["brokerName"] == "broker-a"]
        assert on_a and all(s["sendStatus"] == "SEND_OK" for s in before)
        master, slave = cluster.broker("a0"), cluster.broker("a1")
        await cluster.wait_for(lambda: slave.replicas.confirm_offset == master.log.max_offset
                               and TOPIC in slave.topics.table)
        await cluster.kill("a0")
        await routes(lambda data: by_group(data).get("broker-a") == (
            4, static.location("a1")))

        # The producer skips the read-only group; the consumer reads broker-a from the
        # acting slave (routed as id 0) and stores its offsets there.
        during = await produce(acting, 8, body="during {i}")
        assert {s["brokerName"] for s in during} == {"broker-b"}
        async with consuming(acting, "ali-acting", count=24) as consumer:
            await consumer.receive(24)
        assert sorted(m["body"] for m in consumer.messages) == sorted(
            s["body"] for s in before + during)
        expected = {n: sum(1 for s in on_a if s["queueId"] == n) for n in range(4)}
        with trio.fail_after(WAIT):
            while {n: slave.offsets.table.query("ali-acting", TOPIC, n) or 0
                   for n in range(4)} != expected:
                await trio.sleep(0.05)
