"""The client commands (``triomq produce``/``consume``, ``triomq admin consumer-progress``,
``query-msg-by-id``/``-by-key``, ``broker-status``) against a name server and brokers
over real TCP.

The commands' bodies run in the test's own node (they take a node and an output
stream); what needs a process of its own (SIGINT, a reader that stops early, the
one-line error and its exit code) runs ``triomq`` as a subprocess.
"""

from __future__ import annotations

import base64
import io
import json
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import trio
from client_cluster import Groups, open_groups

from triomq.broker.service import broker_of
from triomq.cli import build_parser
from triomq.client.core.message import Message, MessageQueue
from triomq.client.producer import Producer
from triomq.config import NodeConfig
from triomq.plugin_manager import PluginManager
from triomq.plugins.client_cli.broker_status import broker_status
from triomq.plugins.client_cli.consume import consume
from triomq.plugins.client_cli.produce import deliver_at_ms, produce
from triomq.plugins.client_cli.progress import consumer_progress
from triomq.plugins.client_cli.query import query_by_id, query_by_key
from triomq.plugins.client_cli.session import CommandError
from triomq.settings import from_mapping
from triomq.testing.cluster import free_tcp_port

TOPIC = "cli-topic"
TRIOMQ = [sys.executable, "-c", "import sys; from triomq.cli import main; sys.exit(main())"]


def parse(*argv: str) -> Any:
    return build_parser(PluginManager.discover()).parse_args(list(argv))


async def call(command, node, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = await command(parse(*argv), node, out)
    return code, out.getvalue()


def namesrv(groups: Groups) -> str:
    return ";".join(a.removeprefix("tcp://") for a in groups.namesrv)


def broker_address(groups: Groups, name: str = "a") -> str:
    return groups.cluster.node(name).address.removeprefix("tcp://")


@pytest.fixture
async def groups(tmp_path):
    async with open_groups(tmp_path, "tcp") as harness:
        await harness.create_topic(TOPIC, queues=2)
        yield harness


async def test_produced_messages_are_consumed_once_each_and_the_lag_follows(groups) -> None:
    app = await groups.client("app")
    ns = namesrv(groups)
    code, out = await call(consumer_progress, app, "admin", "consumer-progress", "-n", ns,
                           "-g", "cli-group", "-t", TOPIC, "--json")
    assert code == 0 and json.loads(out)["diffTotal"] == 0

    code, out = await call(produce, app, "produce", "-n", ns, "-t", TOPIC, "--count", "6",
                           "--tags", "TagA", "--keys", "order-{i}", "--body", "hello {i}")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 6
    assert all(line.startswith("SendResult [sendStatus=SEND_OK, msgId=") for line in lines)
    assert {"queueId=0]", "queueId=1]"} <= {p for line in lines for p in line.split(", ")}

    code, out = await call(consumer_progress, app, "admin", "consumer-progress", "-n", ns,
                           "-g", "cli-group", "-t", TOPIC)
    assert code == 0 and out.rstrip().endswith("Diff Total: 6")
    assert out.splitlines()[0].split() == ["Topic", "Broker", "Name", "QID", "Broker", "Offset",
                                           "Consumer", "Offset", "Diff"]

    code, out = await call(consume, app, "consume", "-n", ns, "-t", TOPIC, "-g", "cli-group",
                           "--from-beginning", "--count", "6", "--width", "8")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 6
    bodies = sorted(line.rpartition(" body[")[2] for line in lines)
    assert bodies == [f"{len(f'hello {i}')}]=hello {i}" for i in range(6)]
    assert all(" tags=TagA " in line and " keys=order-" in line for line in lines)

    # The consumer stored its offsets when it stopped: the group has caught up,
    # and a topic is found from the group's offsets without -t.
    code, out = await call(consumer_progress, app, "admin", "consumer-progress", "-n", ns,
                           "-g", "cli-group", "--json")
    progress = json.loads(out)
    assert code == 0 and progress["diffTotal"] == 0
    assert {(r["queueId"], r["brokerOffset"] == r["consumerOffset"])
            for r in progress["offsetTable"]} == {(0, True), (1, True)}
    assert sum(r["brokerOffset"] for r in progress["offsetTable"]) == 6


async def test_progress_of_a_group_without_offsets_asks_for_the_topic(groups) -> None:
    app = await groups.client("app")
    # No consumer of it ever beat: no broker holds its retry topic.
    with pytest.raises(CommandError, match="group 'nobody' has no route: no name server "
                                           "knows its retry topic %RETRY%nobody"):
        await call(consumer_progress, app, "admin", "consumer-progress", "-n",
                   namesrv(groups), "-g", "nobody")
    # One did, but the group stored no offset: the brokers answer no topic.
    await beat(groups, "a", "idle", [TOPIC])
    await groups.wait_routed("%RETRY%idle", {"broker-a"})
    with pytest.raises(CommandError, match="group 'idle' has no stored offset on any "
                                           "broker: name the topic with -t"):
        await call(consumer_progress, app, "admin", "consumer-progress", "-n",
                   namesrv(groups), "-g", "idle")


async def beat(groups: Groups, broker: str, group: str, topics: list[str]) -> None:
    """A consumer's heartbeat to ``broker``, from the admin node's connection (which
    stays open: the group's consumer is online there)."""
    admin = groups.cluster.node("admin")
    body = json.dumps({
        "clientID": "10.0.0.5@1", "producerDataSet": [],
        "consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                             "messageModel": "CLUSTERING",
                             "subscriptionDataSet": [{"topic": t, "subString": "*"}
                                                     for t in topics]}]}).encode()
    answer = await admin.rpc.invoke(groups.cluster.node(broker).address, 34, {}, body)
    assert answer.code == 0, answer.remark


async def test_progress_merges_the_answers_of_the_brokers_of_the_retry_topic(tmp_path) -> None:
    async with open_groups(tmp_path, "tcp", groups=2) as groups:
        await groups.create_topic(TOPIC, queues=2)
        admin = groups.cluster.node("admin")
        answer = await admin.rpc.invoke(groups.cluster.node("a").address, 17, {
            "topic": "only-a", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"})
        assert answer.code == 0, answer.remark
        await groups.wait_routed("only-a", {"broker-a"})
        app = await groups.client("app")
        async with Producer("pg", groups.namesrv).start(app.connect) as producer:
            for queue, count in ((MessageQueue(TOPIC, "broker-a", 0), 3),
                                 (MessageQueue(TOPIC, "broker-b", 1), 2),
                                 (MessageQueue("only-a", "broker-a", 0), 4)):
                for _ in range(count):
                    await producer.send(Message(queue.topic, b"m"), queue)
        # The group's consumer beats to both masters and commits some offsets.
        for broker in ("a", "b"):
            await beat(groups, broker, "progress", [TOPIC, "only-a"])
        for broker, topic, queue_id, offset in (("a", TOPIC, 0, 2), ("b", TOPIC, 1, 2),
                                                ("a", "only-a", 0, 1)):
            answer = await admin.rpc.invoke(groups.cluster.node(broker).address, 15, {
                "consumerGroup": "progress", "topic": topic, "queueId": str(queue_id),
                "commitOffset": str(offset)})
            assert answer.code == 0, answer.remark
        await groups.wait_routed("%RETRY%progress", {"broker-a", "broker-b"})
        ns = namesrv(groups)

        code, out = await call(consumer_progress, app, "admin", "consumer-progress", "-n", ns,
                               "-g", "progress", "--json")
        document = json.loads(out)
        assert code == 0 and document["consumeTps"] == 0.0 and document["diffTotal"] == 4
        assert [(r["topic"], r["brokerName"], r["queueId"], r["brokerOffset"],
                 r["consumerOffset"], r["diff"]) for r in document["offsetTable"]] == [
            (TOPIC, "broker-a", 0, 3, 2, 1), (TOPIC, "broker-a", 1, 0, 0, 0),
            (TOPIC, "broker-b", 0, 0, 0, 0), (TOPIC, "broker-b", 1, 2, 2, 0),
            ("only-a", "broker-a", 0, 4, 1, 3)]
        assert document["offsetTable"][0]["lastTimestamp"] > 0
        assert document["offsetTable"][1]["lastTimestamp"] == 0

        # One topic: broker-b does not hold it and adds nothing.
        code, out = await call(consumer_progress, app, "admin", "consumer-progress", "-n", ns,
                               "-g", "progress", "-t", "only-a")
        lines = out.splitlines()
        assert code == 0 and lines[2].split() == ["only-a", "broker-a", "0", "4", "1", "3"]
        assert lines[3:] == ["", "Consume TPS: 0.00", "Diff Total: 3"]
        with pytest.raises(CommandError, match=r"group 'progress' has no queue of topic "
                                               r"'nowhere': no broker of the route holds it"):
            await call(consumer_progress, app, "admin", "consumer-progress", "-n", ns,
                       "-g", "progress", "-t", "nowhere")


async def test_consume_json_lines_and_a_tag_filter(groups) -> None:
    app = await groups.client("app")
    ns = namesrv(groups)
    for tag in ("TagA", "TagB", "TagA"):
        code, _ = await call(produce, app, "produce", "-n", ns, "-t", TOPIC, "--tags", tag)
        assert code == 0
    code, out = await call(consume, app, "consume", "-n", ns, "-t", TOPIC, "-g", "json-group",
                           "--from-beginning", "--tags", "TagA", "--count", "2", "--json")
    messages = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [m["tags"] for m in messages] == ["TagA", "TagA"]
    assert {m["topic"] for m in messages} == {TOPIC}


async def test_produce_with_a_delay_level_is_consumed_after_its_delay(groups) -> None:
    app = await groups.client("app")
    ns = namesrv(groups)
    code, out = await call(produce, app, "produce", "-n", ns, "-t", TOPIC, "--delay-level",
                           "1", "--body", "later", "--json")
    assert code == 0 and json.loads(out)["sent"] == 1
    log = broker_of(groups.cluster.node("a")).log
    (waiting,) = [r for r in log.iter_records() if r.topic == "SCHEDULE_TOPIC_XXXX"]
    code, out = await call(consume, app, "consume", "-n", ns, "-t", TOPIC, "-g", "delay-group",
                           "--from-beginning", "--count", "1", "--json")
    (message,) = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and base64.b64decode(message["body"]) == b"later"
    # Level 1 of the default message_delay_level: one second.
    (stored,) = [r for r in log.iter_records() if r.topic == TOPIC]
    assert stored.store_timestamp >= waiting.store_timestamp + 1000
    assert "DELAY" not in stored.properties
    with pytest.raises(CommandError, match="--delay-level"):
        await call(produce, app, "produce", "-n", ns, "-t", TOPIC, "--delay-level", "-1")


async def test_produce_deliver_at_is_a_timer_message_consumed_at_its_time(groups) -> None:
    app = await groups.client("app")
    ns = namesrv(groups)
    log = broker_of(groups.cluster.node("a")).log
    deliver = time.time_ns() // 1_000_000 + 1500
    code, out = await call(produce, app, "produce", "-n", ns, "-t", TOPIC, "--deliver-at",
                           str(deliver), "--body", "at", "--json")
    assert code == 0 and json.loads(out)["sent"] == 1
    (waiting,) = [r for r in log.iter_records() if r.topic == "rmq_sys_wheel_timer"]
    assert waiting.properties["TIMER_DELIVER_MS"] == str(deliver)
    code, out = await call(consume, app, "consume", "-n", ns, "-t", TOPIC, "-g", "timer-group",
                           "--from-beginning", "--count", "1", "--json")
    (message,) = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and base64.b64decode(message["body"]) == b"at"
    (stored,) = [r for r in log.iter_records() if r.topic == TOPIC]
    assert stored.store_timestamp >= deliver


def test_deliver_at_reads_iso_times_and_epoch_ms() -> None:
    assert deliver_at_ms("1700000000123") == 1_700_000_000_123
    assert deliver_at_ms("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert deliver_at_ms("2023-11-14T22:13:20") == 1_700_000_000_000
    assert deliver_at_ms("2023-11-15T00:13:20+02:00") == 1_700_000_000_000
    with pytest.raises(CommandError, match="--deliver-at"):
        deliver_at_ms("tomorrow")


async def test_produce_json_and_a_summary_for_many(groups) -> None:
    app = await groups.client("app")
    ns = namesrv(groups)
    code, out = await call(produce, app, "produce", "-n", ns, "-t", TOPIC, "--count", "3",
                           "--size", "10", "--json")
    document = json.loads(out)
    assert code == 0 and document["sent"] == 3 and document["failed"] == 0
    assert [r["sendStatus"] for r in document["results"]] == ["SEND_OK"] * 3
    code, out = await call(produce, app, "produce", "-n", ns, "-t", TOPIC, "--count", "120")
    assert code == 0 and out.startswith(f"sent 120 message(s) to {TOPIC} in ")
    assert "SEND_OK 120; failed 0" in out and len(out.splitlines()) == 1


async def test_produce_json_names_every_failure_and_its_reason_in_a_summary_too(
        groups) -> None:
    app = await groups.client("app")
    too_big = str(4 * 1024 * 1024 + 1)  # over the broker's max_message_size: refused
    code, out = await call(produce, app, "produce", "-n", namesrv(groups), "-t", TOPIC,
                           "--count", "2", "--size", too_big, "--summary", "--json")
    document = json.loads(out)
    assert code == 1 and document["sent"] == 0 and document["failed"] == 2
    assert [f["index"] for f in document["failures"]] == [0, 1]
    assert all("MESSAGE_ILLEGAL" in f["error"] for f in document["failures"])


async def test_a_message_found_by_offset_id_by_client_id_and_by_key(groups) -> None:
    app = await groups.client("app")
    ns = namesrv(groups)
    code, out = await call(produce, app, "produce", "-n", ns, "-t", TOPIC, "--keys",
                           "k-1 other", "--tags", "T", "--body", "findme", "--json")
    sent = json.loads(out)["results"][0]
    assert code == 0

    code, out = await call(query_by_id, app, "admin", "query-msg-by-id", "-n", ns, "-i",
                           sent["offsetMsgId"])
    assert code == 0 and len(out.splitlines()) == 1
    assert f"queue=broker-a:{sent['messageQueue']['queueId']} " in out
    assert f"offset={sent['queueOffset']} msgId={sent['msgId']} " in out
    assert f"storeHost={broker_address(groups)} " in out and "'KEYS': 'k-1 other'" in out
    assert out.rstrip().endswith("body[6]=findme")

    code, out = await call(query_by_id, app, "admin", "query-msg-by-id", "-n", ns, "-i",
                           sent["msgId"], "-t", TOPIC, "--json")
    (found,) = json.loads(out)["messages"]
    assert code == 0 and found["offsetMsgId"] == sent["offsetMsgId"]

    code, out = await call(query_by_key, app, "admin", "query-msg-by-key", "-n", ns, "-t",
                           TOPIC, "-k", "other", "--json")
    (found,) = json.loads(out)["messages"]
    assert code == 0 and found["msgId"] == sent["msgId"] and found["keys"] == ["k-1", "other"]
    assert found["storeHost"] == broker_address(groups)

    code, out = await call(query_by_key, app, "admin", "query-msg-by-key", "-n", ns, "-t",
                           TOPIC, "-k", "nobody")
    assert code == 1 and out.strip() == f"error: no message of topic {TOPIC} with key nobody"


async def start_slave(groups: Groups, master: str) -> None:
    data = {"name": "a2", "role": "broker", "listen": f"tcp://127.0.0.1:{free_tcp_port()}",
            "log_level": "WARNING", "store": {"path": str(groups.cluster.root / "a2")},
            "broker": {"broker_name": "broker-a", "broker_id": 1, "master_epoch": 1,
                       "ha_listen_port": 0, "flush_policy": "none",
                       "ha_master_address": broker_of(groups.cluster.node(master)).ha_address,
                       "namesrv_addr": groups.namesrv}}
    await groups.cluster.start("a2", from_mapping(NodeConfig, data))


async def test_broker_status_of_a_static_master_and_its_slave(groups) -> None:
    app = await groups.client("app")
    code, _ = await call(produce, app, "produce", "-n", namesrv(groups), "-t", TOPIC)
    assert code == 0
    await start_slave(groups, "a")
    master, slave = broker_of(groups.cluster.node("a")), broker_of(groups.cluster.node("a2"))
    with trio.fail_after(20):
        while not (slave.log.max_offset == master.log.max_offset
                   and slave.broker_id in master.replicas.sync_state_set):
            await trio.sleep(0.01)

    code, out = await call(broker_status, app, "admin", "broker-status", "-b",
                           broker_address(groups, "a"), "--json")
    table = json.loads(out)["table"]
    assert code == 0
    assert {k: table[k] for k in ("brokerRole", "brokerName", "brokerId", "masterEpoch")} == {
        "brokerRole": "MASTER", "brokerName": "broker-a", "brokerId": "0", "masterEpoch": "1"}
    assert table["commitLogMaxOffset"] == str(master.log.max_offset)
    assert table["commitLogMinOffset"] == "0" and table["haMasterAddress"] == ""
    assert table["syncStateSet"] == "0,1"  # the master's and its slave's broker ids
    (connection,) = json.loads(table["haConnectionInfo"])
    assert connection["brokerId"] == 1 and connection["inSync"] is True
    assert table["inSyncSlaveNums"] == "1"

    code, out = await call(broker_status, app, "admin", "broker-status", "-b",
                           broker_address(groups, "a2"))
    rows = dict(line.split(" : ", 1) for line in out.splitlines() if " : " in line)
    assert code == 0
    assert {k.strip(): v for k, v in rows.items()}["brokerRole"] == "SLAVE"
    values = {k.strip(): v for k, v in rows.items()}
    assert values["brokerId"] == "1" and values["syncStateSet"] == ""
    assert values["haMasterAddress"] == master.ha_address
    assert values["commitLogMaxOffset"] == str(master.log.max_offset)
    code, out = await call(broker_status, app, "admin", "broker-status", "-b",
                           broker_address(groups, "a"))
    assert "HA connections:" in out
    ha_rows = [line.split() for line in out.split("HA connections:")[1].splitlines()]
    assert ["1", str(master.log.max_offset), "0", "True"] in ha_rows  # broker 1, in sync


# -- in a process of its own ------------------------------------------------------------


def run_triomq(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TRIOMQ, *argv], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("argv", [
    ["produce", "-t", TOPIC],
    ["consume", "-t", TOPIC, "-g", "g"],
    ["admin", "consumer-progress", "-g", "g", "-t", TOPIC],
    ["admin", "query-msg-by-key", "-t", TOPIC, "-k", "k"],
    ["admin", "query-msg-by-id", "-i", "7F000001000027100000000000000000"],
])
def test_an_unreachable_name_server_is_one_line_and_exit_2(argv) -> None:
    address = f"127.0.0.1:{free_tcp_port()}"
    done = run_triomq(*argv, "-n", address, "--timeout", "2")
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("triomq: error: no name server answered")
    assert done.stderr.count(address) == 1, done.stderr


def test_an_unreachable_broker_is_one_line_and_exit_2() -> None:
    address = f"127.0.0.1:{free_tcp_port()}"
    done = run_triomq("admin", "broker-status", "-b", address, "--timeout", "2")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert done.stderr == f"triomq: error: no broker answered ({address}: connection refused)\n"


async def test_consume_ends_quietly_at_sigint_with_its_offsets_stored(groups) -> None:
    app = await groups.client("app")
    ns = namesrv(groups)
    code, _ = await call(produce, app, "produce", "-n", ns, "-t", TOPIC, "--count", "3")
    assert code == 0
    argv = [*TRIOMQ, "consume", "-n", ns, "-t", TOPIC, "-g", "sigint-group", "--from-beginning"]
    process = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE,
                                               stderr=subprocess.PIPE)
    try:
        with trio.fail_after(60):
            received = b""
            while received.count(b"\n") < 3:
                chunk = await process.stdout.receive_some()
                assert chunk, "consume ended before printing every message"
                received += chunk
            process.send_signal(signal.SIGINT)
            stdout = received + b"".join([chunk async for chunk in process.stdout])
            stderr = b"".join([chunk async for chunk in process.stderr])
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert len(stdout.splitlines()) == 3 and stderr.decode().strip() == "Consumer Started."
    # The offsets the stopping consumer stored: no lag left (asked again a few times,
    # should an update still be on its way through a loaded broker).
    with trio.move_on_after(10):
        while True:
            code, out = await call(consumer_progress, app, "admin", "consumer-progress",
                                   "-n", ns, "-g", "sigint-group", "--json")
            if code != 0 or json.loads(out)["diffTotal"] == 0:
                break
            await trio.sleep(0.1)
    assert code == 0 and json.loads(out)["diffTotal"] == 0, out


async def test_consume_into_a_reader_that_stops_early_ends_quietly(groups) -> None:
    app = await groups.client("app")
    ns = namesrv(groups)
    # More than a pipe holds: a consumer that wrote every line before head went away
    # would wait, unaware, for a next message.
    code, _ = await call(produce, app, "produce", "-n", ns, "-t", TOPIC, "--count", "1000")
    assert code == 0
    command = " ".join([*(f"'{a}'" for a in TRIOMQ), "consume", "-n", f"'{ns}'", "-t", TOPIC,
                        "-g", "head-group", "--from-beginning"])
    with trio.fail_after(60):
        done = await trio.run_process(["bash", "-c", f"set -o pipefail; {command} | head -n 2"],
                                      capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2
    assert done.stderr.decode().strip() == "Consumer Started."
