"""RocketMQ's own name server, broker and controller, run from their Maven artifacts.

``rocketmq_server/pom.xml`` pins ``rocketmq-namesrv``, ``rocketmq-broker`` and
``rocketmq-controller`` (``VERSION``); ``make rocketmq-server`` (which ``make
test`` runs where ``mvn`` is) resolves them into the local Maven repository
and writes their classpath to ``rocketmq_server/target/classpath.txt``.

Each server is a JVM of its own (``JavaServer``) on 127.0.0.1, with a small
heap, its properties file, logs (RocketMQ writes them under ``user.home``)
and store under the folder it is given; ``open_rocketmq`` starts a name
server and one broker and stops them cleanly (SIGTERM: RocketMQ's shutdown
hooks flush the store and write ``config/*.json``). Tests and benchmarks use
it alike; ``unavailable_server`` says why it cannot run here (tests skip
with that).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from triomq.testing.cluster import free_tcp_port

HERE = Path(__file__).resolve().parent
MODULE = HERE / "rocketmq_server"
CLASSPATH = MODULE / "target" / "classpath.txt"
VERSION = "5.3.3"
JAVA = shutil.which("java")
MVN = shutil.which("mvn")
HOST = "127.0.0.1"
# Liveness bounds, not timings: a JVM starting on a busy two-core machine takes seconds,
# and a broker's shutdown hook some ten (it waits for its services' threads).
START_WAIT = 120.0
STOP_WAIT = 90.0
# Small heaps and a quick start over peak speed: a 2-core machine runs several at once.
JVM_OPTIONS = ("-Xms64m", "-Xmx256m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC",
               "-XX:TieredStopAtLevel=1", "-Xshare:auto",
               # The controller's DLedger serializes JDK objects by reflection (Hessian).
               "--add-opens=java.base/java.lang=ALL-UNNAMED",
               "--add-opens=java.base/java.util=ALL-UNNAMED",
               "--add-opens=java.base/java.nio=ALL-UNNAMED")
NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
CONTROLLER_MAIN = "org.apache.rocketmq.controller.ControllerStartup"
#: What each prints on its stdout once it serves.
BOOTED = "boot success"


class ServerNotBuilt(RuntimeError):
    """``make rocketmq-server`` has not run: there is no classpath to start a server with."""


def unavailable_server() -> str | None:
    """Why RocketMQ's servers cannot run here, or None."""
    if JAVA is None:
        return "java is not on PATH: RocketMQ's servers are Java programs"
    if MVN is None:
        return "mvn is not on PATH: RocketMQ's server jars come through Maven"
    unreachable = MODULE / "target" / "unreachable.txt"
    if unreachable.exists():
        return f"Maven could not fetch RocketMQ's server jars: {unreachable.read_text().strip()}"
    return None


def classpath() -> str:
    """The servers' classpath, as ``make rocketmq-server`` wrote it."""
    if not CLASSPATH.exists():
        raise ServerNotBuilt(f"{MODULE} is not built: run `make rocketmq-server` "
                             f"(`make test` runs it)")
    return CLASSPATH.read_text().strip()


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_broker_port() -> int:
    """A listen port for a RocketMQ broker: it also listens on the port two below (its
    "fast" remoting server) and the one above (HA), so all three were free a moment ago."""
    for _ in range(1_000):
        port = free_tcp_port()
        if _bindable(port - 2) and _bindable(port + 1):
            return port
    raise OSError(f"no free TCP port on {HOST} with its neighbours -2 and +1 free")


def properties(settings: Mapping[str, object]) -> str:
    """A Java properties file of ``settings`` (values plain: ports, paths, names)."""
    return "".join(f"{key}={value}\n" for key, value in settings.items())


class JavaServer:
    """One RocketMQ server JVM: ``main`` run with a properties file in ``home``."""

    def __init__(self, name: str, main: str, home: Path, port: int,
                 settings: Mapping[str, object]) -> None:
        self.name = name
        self.main = main
        self.home = home
        self.port = port
        self.settings = dict(settings)
        self.config = home / f"{name}.properties"
        self.output = home / f"{name}.out"
        #: The JVM's options: the benchmarks give a broker full JIT compilation.
        self.jvm_options: tuple[str, ...] = JVM_OPTIONS
        self.process: trio.Process | None = None

    @property
    def address(self) -> str:
        """``host:port``, as RocketMQ's clients and servers write an address."""
        return f"{HOST}:{self.port}"

    def argv(self) -> list[str]:
        assert JAVA is not None
        return [JAVA, *self.jvm_options, f"-Duser.home={self.home}",
                f"-Drocketmq.home.dir={self.home}", "-cp", classpath(), self.main,
                "-c", str(self.config)]

    async def start(self) -> None:
        """Start the JVM; return once it says it serves (fails, with its output, if it
        exits first or takes over ``START_WAIT``)."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.config.write_text(properties(self.settings))
        with self.output.open("wb") as out:
            self.process = await trio.lowlevel.open_process(
                self.argv(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=self.home)
        with trio.move_on_after(START_WAIT):
            while BOOTED not in self._printed():
                if self.process.poll() is not None:
                    raise RuntimeError(f"RocketMQ's {self.name} exited with "
                                       f"{self.process.returncode}: {self._tail()}")
                await trio.sleep(0.1)
            return
        self.process.kill()
        raise RuntimeError(f"RocketMQ's {self.name} did not start in {START_WAIT} s: "
                           f"{self._tail()}")

    def _printed(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""

    def _tail(self) -> str:
        # Logback's own status lines come first; what RocketMQ says is at the end.
        return "\n".join(self._printed().splitlines()[-15:])

    async def stop(self) -> None:
        """Stop it cleanly (SIGTERM runs RocketMQ's shutdown hook) and wait for its exit;
        killed, and an error, if that takes over ``STOP_WAIT``."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        with trio.move_on_after(STOP_WAIT):
            await process.wait()
            return
        process.kill()
        await process.wait()
        raise RuntimeError(f"RocketMQ's {self.name} did not stop in {STOP_WAIT} s")

    def pause(self) -> None:
        """SIGSTOP it: its connections stay open and nothing on them is answered."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)

    async def kill(self) -> None:
        """SIGKILL it (a crash: no shutdown hook runs; a paused one too)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            await self.process.wait()


def namesrv(home: Path, name: str = "namesrv") -> JavaServer:
    """A RocketMQ name server in ``home/<name>``."""
    port = free_tcp_port()
    return JavaServer(name, NAMESRV_MAIN, home / name, port,
                      {"listenPort": port, "bindAddress": HOST})


def broker(home: Path, namesrv_address: str, *, name: str = "broker-a", broker_id: int = 0,
           cluster: str = "DefaultCluster", **settings: object) -> JavaServer:
    """A RocketMQ broker in ``home/<name>-<broker_id>``, its store under ``store/`` there,
    registering with ``namesrv_address``; ``settings`` are more of broker.conf's keys."""
    port = free_broker_port()
    folder = home / f"{name}-{broker_id}"
    store = folder / "store"
    return JavaServer(f"{name}-{broker_id}", BROKER_MAIN, folder, port, {
        "brokerClusterName": cluster, "brokerName": name, "brokerId": broker_id,
        "namesrvAddr": namesrv_address, "listenPort": port, "bindAddress": HOST,
        "brokerIP1": HOST, "brokerIP2": HOST, "storePathRootDir": store,
        "storePathCommitLog": store / "commitlog", **settings})


def controller(home: Path, name: str, peers: Mapping[str, int], **settings: object
               ) -> JavaServer:
    """A RocketMQ controller (DLedger) ``name`` of the group whose members ``peers`` are
    (their names and ports), in ``home/<name>``. It serves brokers and tools on its DLedger
    port: RocketMQ's DLedger controller shares that server (``listenPort`` is unused)."""
    folder = home / name
    group = ";".join(f"{peer}-{HOST}:{peer_port}" for peer, peer_port in peers.items())
    return JavaServer(name, CONTROLLER_MAIN, folder, peers[name], {
        "bindAddress": HOST, "controllerDLegerGroup": "group1",
        "controllerDLegerPeers": group, "controllerDLegerSelfId": name,
        "controllerStorePath": folder / "store", **settings})


class RocketMQ:
    """A running name server and broker: their addresses and the broker's store root."""

    def __init__(self, namesrv: JavaServer, broker: JavaServer) -> None:
        self.namesrv = namesrv
        self.broker = broker

    @property
    def store(self) -> Path:
        return Path(str(self.broker.settings["storePathRootDir"]))


@asynccontextmanager
async def open_rocketmq(home: Path, **broker_settings: object) -> AsyncIterator[RocketMQ]:
    """RocketMQ's name server and a master broker under ``home``, both stopped cleanly at
    the end (the broker first) unless already stopped."""
    names = namesrv(home)
    await names.start()
    try:
        master = broker(home, names.address, **broker_settings)
        try:
            await master.start()
            yield RocketMQ(names, master)
        finally:
            await master.stop()
    finally:
        await names.stop()

