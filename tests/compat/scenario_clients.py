"""RocketMQ's own clients as processes running scenarios, and calls on the cluster they meet.

Each client is a program with one scenario per sub-command, printing a JSON
object a line; the long-running ones stop when their stdin closes:

- the Java client and mqadmin: ``rocketmq_java/``, a Maven module pinning
  ``rocketmq-client`` and ``rocketmq-tools`` (RocketMQ 5, and RocketMQ 4 as a
  profile). ``make rocketmq-java`` builds it once (``make test`` does, where
  ``mvn`` is), leaving each profile's classes and classpath under
  ``rocketmq_java/target/<profile>/``; its ``triomq.compat.Main`` runs the
  scenarios;
- the Go client: ``rocketmq_go/``, a Go module pinning
  ``github.com/apache/rocketmq-client-go/v2``; ``make rocketmq-go`` builds
  ``rocketmq_go/bin/rocketmqgo``.

Where a client cannot be built here (no JDK, Maven or Go, or their registry
out of reach), ``unavailable_*`` says why and its tests skip with that.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from triomq.protocol.route import loads
from triomq.runtime import Node
from triomq.testing.cluster import BROKER_NAME, Cluster

HERE = Path(__file__).resolve().parent
MODULE = HERE / "rocketmq_java"
GO_MODULE = HERE / "rocketmq_go"
GO_BINARY = GO_MODULE / "bin" / "rocketmqgo"
JAVA = shutil.which("java")
MVN = shutil.which("mvn")
GO = shutil.which("go")
TOPIC = "CompatTopic"
QUEUES = 4
# Generous: a JVM starting on a busy two-core CI machine may take seconds alone.
WAIT = 120
GET_ROUTEINFO_BY_TOPIC = 105
QUERY_CONSUMER_OFFSET = 14
CREATE_TOPIC = 17


def unavailable_java() -> str | None:
    """Why RocketMQ's Java client cannot run here, or None."""
    if JAVA is None:
        return "java is not on PATH: RocketMQ's client is a Java library"
    if MVN is None:
        return "mvn is not on PATH: RocketMQ's client jars come through Maven"
    unreachable = MODULE / "target" / "unreachable.txt"
    if unreachable.exists():
        return f"Maven could not fetch RocketMQ's jars: {unreachable.read_text().strip()}"
    return None


def require_java_build(profile: str) -> None:
    """Fail (not skip) when the module was not built: `make test` builds it."""
    if not (MODULE / "target" / profile / "classpath.txt").exists():
        pytest.fail(f"{MODULE} is not built for {profile}: run `make rocketmq-java` "
                    f"(`make test` runs it)", pytrace=False)


def unavailable_go() -> str | None:
    """Why RocketMQ's Go client cannot run here, or None."""
    if GO is None:
        return "go is not on PATH: RocketMQ's Go client is built from its module"
    unreachable = GO_MODULE / "bin" / "unreachable.txt"
    if unreachable.exists():
        return f"Go could not fetch RocketMQ's Go client: {unreachable.read_text().strip()}"
    return None


def require_go_build() -> None:
    """Fail (not skip) when the Go program was not built: `make test` builds it."""
    if not GO_BINARY.exists():
        pytest.fail(f"{GO_BINARY} is not built: run `make rocketmq-go` (`make test` runs it)",
                    pytrace=False)


def java_argv(profile: str, home: Path, *args: str) -> list[str]:
    """The command running ``triomq.compat.Main`` with RocketMQ ``profile``'s jars."""
    target = MODULE / "target" / profile
    classpath = (target / "classpath.txt").read_text().strip() + os.pathsep \
        + str(target / "classes")
    assert JAVA is not None
    # A quick start over peak speed; user.home is where RocketMQ's client writes its logs,
    # rocketmq.home.dir where 4.9's mqadmin reads its logging set-up (java_client writes it).
    return [JAVA, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto",
            f"-Duser.home={home}", f"-Drocketmq.home.dir={home}", "-cp", classpath,
            "triomq.compat.Main", *args]


def parse(line: bytes) -> dict[str, Any]:
    """One line a scenario printed."""
    try:
        parsed = json.loads(line)
    except ValueError:
        parsed = None
    assert isinstance(parsed, dict), f"the client printed {line!r}, not a JSON object"
    return parsed


class ScenarioProcess:
    """A running scenario: what it printed so far."""

    def __init__(self, process: trio.Process, stderr: Path) -> None:
        self.process = process
        self.stderr = stderr
        self.lines: list[dict[str, Any]] = []
        #: The topic's queues a push consumer holds, as of its last change.
        self.queues: dict[tuple[str, int], bool] = {}
        self._pending = b""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The lines that are consumed messages."""
        return [line for line in self.lines if "queueOffset" in line and "mode" not in line]

    async def until(self, condition: Callable[[], bool]) -> None:
        """Read what it prints until ``condition()`` holds."""
        assert self.process.stdout is not None
        with trio.fail_after(WAIT):
            while not condition():
                while b"\n" not in self._pending:
                    chunk = await self.process.stdout.receive_some()
                    assert chunk, f"the client exited early: {self.stderr.read_text()}"
                    self._pending += chunk
                raw, self._pending = self._pending.split(b"\n", 1)
                line = parse(raw)
                if "queues" in line:
                    self.queues = {(q["brokerName"], q["queueId"]): q["locked"]
                                   for q in line["queues"]}
                self.lines.append(line)

    @property
    def printed(self) -> list[str]:
        """What an ``mqadmin-stream`` command printed so far, a line each."""
        return [line["printed"] for line in self.lines if "printed" in line]

    async def receive(self, count: int) -> None:
        """Read until it has printed ``count`` consumed messages."""
        await self.until(lambda: len(self.messages) >= count)


class ScenarioClient:
    """Runs a client's scenarios (``program`` and a sub-command) against a cluster's name
    server; ``home``, their working directory, holds what they write besides their
    output (``mqadmin consumerStatus`` writes each consumer's running info there)."""

    def __init__(self, cluster: Cluster, program: Callable[..., list[str]], home: Path) -> None:
        self.cluster = cluster
        self.program = program
        self.home = home
        self._runs = 0

    @property
    def namesrv(self) -> str:
        (address,) = self.cluster.namesrv_addresses.values()
        return address.removeprefix("tcp://")

    def argv(self, command: str, **options: object) -> list[str]:
        args = [command]
        for key, value in {"namesrv": self.namesrv, "topic": TOPIC, **options}.items():
            args += [f"--{key.replace('_', '-')}", str(value)]
        return self.program(*args)

    def _stderr(self, command: str) -> Path:
        self._runs += 1
        return self.home / f"{command}-{self._runs}.stderr"

    async def run(self, command: str, **options: object) -> list[dict[str, Any]]:
        """Run a scenario to its end; the lines it printed."""
        self.home.mkdir(exist_ok=True)
        with trio.fail_after(WAIT):
            done = await trio.run_process(self.argv(command, **options), capture_stdout=True,
                                          capture_stderr=True, check=False, cwd=self.home)
        assert done.returncode == 0, done.stderr.decode()
        return [parse(line) for line in done.stdout.splitlines()]

    @asynccontextmanager
    async def running(self, command: str, **options: object) -> AsyncIterator[ScenarioProcess]:
        """A scenario running until the block ends; its stdin is closed then, and it shuts
        its client down (storing offsets) and exits."""
        self.home.mkdir(exist_ok=True)
        stderr = self._stderr(command)
        async with trio.open_nursery() as nursery:
            with stderr.open("wb") as errors:
                process = await nursery.start(partial(
                    trio.run_process, self.argv(command, **options), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=errors, check=False, cwd=self.home))
            running = ScenarioProcess(process, stderr)
            yield running
            await process.stdin.aclose()
            await running.until(lambda: any("stopped" in line for line in running.lines))
            with trio.fail_after(WAIT):
                await process.wait()
        assert process.returncode == 0, stderr.read_text()

    @asynccontextmanager
    async def mqadmin_streaming(self, command: list[str]) -> AsyncIterator[ScenarioProcess]:
        """One mqadmin command that runs until stopped (``clusterRT``), what it prints
        read as it prints it (``ScenarioProcess.printed``); stopped when the block ends."""
        async with self.running("mqadmin-stream") as streaming:
            assert streaming.process.stdin is not None
            await streaming.process.stdin.send_all(("\t".join(command) + "\n").encode())
            yield streaming

    async def mqadmin(self, *commands: list[str]) -> list[dict[str, Any]]:
        """mqadmin's commands run one after another in one JVM (the Java client's
        ``mqadmin`` sub-command): each one's output."""
        self.home.mkdir(exist_ok=True)
        script = "".join("\t".join(command) + "\n" for command in commands)
        with trio.fail_after(WAIT * 2):
            done = await trio.run_process(self.program("mqadmin"),
                                          stdin=script.encode(), capture_stdout=True,
                                          capture_stderr=True, check=False, cwd=self.home)
        assert done.returncode == 0, done.stderr.decode()
        return [parse(line) for line in done.stdout.splitlines()]


def java_client(cluster: Cluster, profile: str = "rocketmq-5") -> ScenarioClient:
    """RocketMQ's Java client with Maven ``profile``'s jars."""
    require_java_build(profile)
    home = cluster.root / f"java-{profile}"
    # RocketMQ 4.9's mqadmin runs no command without a logback file of its own under
    # its home (its distribution's conf/logback_tools.xml): one logging nothing.
    (home / "conf").mkdir(parents=True, exist_ok=True)
    (home / "conf" / "logback_tools.xml").write_text(
        '<configuration><root level="OFF"/></configuration>\n')
    return ScenarioClient(cluster, partial(java_argv, profile, home), home)


def go_client(cluster: Cluster) -> ScenarioClient:
    """RocketMQ's Go client."""
    require_go_build()
    return ScenarioClient(cluster, lambda *args: [str(GO_BINARY), *args],
                          cluster.root / "go")


async def create_topic(admin: Node, master_address: str, namesrv: str, topic: str = TOPIC,
                       queues: int = QUEUES) -> None:
    """Create ``topic`` on the master and wait until the name server routes it there."""
    await create_topic_on(admin, master_address, topic, queues)
    await wait_routed(admin, master_address, namesrv, topic, queues)


async def create_topic_on(admin: Node, broker_address: str, topic: str = TOPIC,
                          queues: int = QUEUES) -> None:
    """Create ``topic`` on the broker at ``broker_address``."""
    # Every field of RocketMQ's CreateTopicRequestHeader, as mqadmin sends it: its broker
    # refuses a header without defaultTopic or topicFilterType.
    answer = await admin.rpc.invoke(broker_address, CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues),
        "writeQueueNums": str(queues), "perm": "6", "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0", "order": "false"})
    assert answer.code == 0, answer.remark


async def wait_routed(admin: Node, master_address: str, namesrv: str, topic: str,
                      queues: int) -> None:
    """Until the name server routes ``topic``'s ``queues`` queues to the master."""
    with trio.fail_after(30):
        while True:
            answer = await admin.rpc.invoke(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            if answer.code == 0:
                # fastjson: RocketMQ's name server writes brokerAddrs' keys bare.
                route = loads(answer.body)
                addresses = {b["brokerName"]: b["brokerAddrs"].get("0")
                             for b in route["brokerDatas"]}
                counts = {(q["brokerName"], q["readQueueNums"], q["writeQueueNums"])
                          for q in route["queueDatas"]}
                if addresses.get(BROKER_NAME) == master_address.removeprefix("tcp://") \
                        and counts == {(BROKER_NAME, queues, queues)}:
                    return
            await trio.sleep(0.02)


async def consumer_offsets(admin: Node, master_address: str, group: str) -> dict[int, int]:
    """The group's offsets of the topic's queues stored on the master (-1: none)."""
    offsets = {}
    for queue in range(QUEUES):
        answer = await admin.rpc.invoke(master_address, QUERY_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": TOPIC, "queueId": str(queue)})
        offsets[queue] = int(answer.ext_fields["offset"]) if answer.code == 0 else -1
    return offsets


async def offsets_become(admin: Node, master_address: str, group: str,
                         expected: dict[int, int]) -> None:
    """Wait until the group's offsets on the master are ``expected``: RocketMQ's clients
    store them with one-way requests (a liveness bound, not a timing)."""
    offsets = None
    with trio.move_on_after(WAIT):
        while (offsets := await consumer_offsets(admin, master_address, group)) != expected:
            await trio.sleep(0.05)
    assert offsets == expected


def assert_stored_as_answered(got: dict[str, Any], results: dict[tuple[str, int], dict[str, Any]],
                              count: int, *, batch_ids: str) -> None:
    """Each message read back (``got``, by ``"<mode> <seq>"``) carries the body, tag and
    keys its scenario sent, and sits at the queue, offset and ids its send's answer
    (``results``, by mode and seq) named; a batch's ``count`` messages one offset after
    another, their ids from the answer's ``batch_ids`` list."""
    for (mode, i), line in results.items():
        for n in range(count) if mode == "batch" else [i]:
            message = got[f"{mode} {n}"]
            assert (message.body.decode(), message.tags, message.keys) \
                == (f"{mode} {n}", f"Tag{'ABC'[n % 3]}", (f"key-{mode}-{n}",))
            if mode == "batch":  # one queue, one offset after another, ids in order
                assert (message.queue_id, message.queue_offset, message.msg_id,
                        message.offset_msg_id) == (line["queueId"], line["queueOffset"] + n,
                                                   line[batch_ids][n], line["offsetMsgIds"][n])
            elif mode != "oneway":
                assert (message.queue_id, message.queue_offset, message.msg_id,
                        message.offset_msg_id) == (line["queueId"], line["queueOffset"],
                                                   line["msgId"], line["offsetMsgId"])
