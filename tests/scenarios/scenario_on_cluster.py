"""The real cluster's pump of a scenario: ``triomq.testing.cluster`` nodes over trio.

Controllers, brokers and a client node on the in-process transport; links
are cut with the transport's fault injection (held bytes, as a partition
does to TCP). The committed state is the controller leader's; reported
losses are the elections the controllers' cores report.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio

import triomq.plugins.broker
import triomq.plugins.controller_dledger
from triomq.broker.core.codes import RequestCode, ResponseCode
from triomq.client.core.message import MessageQueue
from triomq.client.core.pull import pull_header
from triomq.controller.client import ControllerClient
from triomq.controller.core.service_core import Elected, Output
from triomq.controller.service import ControllerService, controller_of
from triomq.plugin_manager import PluginManager
from triomq.plugins.transport_inproc import get_network
from triomq.protocol.heartbeat import SubscriptionData
from triomq.rpc import RpcError
from triomq.runtime import Node
from triomq.testing import scenarios as sc
from triomq.testing.cluster import BROKER_NAME, Cluster, open_cluster
from triomq.testing.direct_send import DirectProducer, SendError
from triomq.testing.scenario_run import ScenarioRun

#: Timers as fast as the simulation's (ms), so that a scenario takes seconds.
CONTROLLER = {"raft": {"tick_interval_ms": 20, "fsync": False}}
BROKER = {"ha_send_heartbeat_interval": 50, "flush_policy": "none",
          "all_ack_in_sync_state_set": True, "sync_flush_timeout": 1000,
          "ha_max_time_slave_not_catchup": 1000, "check_sync_state_set_period": 200}
STORE = {"options": {"segment_size": 65536}}
#: The topic the scenario puts to and pulls from.
TOPIC = "orders"


def controller_plugins() -> PluginManager:
    """Discovered plugins plus the broker and controller plugins, registered explicitly
    (whether or not their entry points are installed)."""
    pm = PluginManager.discover(disable={"broker", "controller_dledger"})
    pm.register(triomq.plugins.broker, name="broker")
    pm.register(triomq.plugins.controller_dledger, name="controller_dledger")
    return pm


def _name(address: str | None) -> str | None:
    """``inproc://b1`` -> ``b1``."""
    return None if address is None else address.removeprefix("inproc://")


class ClusterPump:
    """Runs one scenario over a real cluster in ``cluster``."""

    def __init__(self, scenario: sc.Scenario, cluster: Cluster, client: Node,
                 nursery: trio.Nursery) -> None:
        self.cluster = cluster
        self.client = client
        self.nursery = nursery
        self.network = get_network(cluster.network)
        self.run = ScenarioRun(scenario)
        #: (offset, body) of every acknowledged put, in order (an offset may be reused
        #: after an unclean election).
        self.acked: list[tuple[int, bytes]] = []
        self.losses: set[int] = set()
        self.leader_killed = False
        #: Broker name -> its address (kept after it is killed).
        self.addresses: dict[str, str] = {}
        self._bodies = 0

    async def __call__(self) -> ScenarioRun:
        """Run the script to its end; its outcomes are on the returned run."""
        answer: object = None
        while not isinstance(command := self.run.next(self.snapshot(), answer), sc.Done):
            answer = None
            if isinstance(command, sc.Advance):
                await trio.sleep(0.01)
            else:
                answer = await self._perform(command)
        return self.run

    # -- controllers ----------------------------------------------------------------------

    def controllers(self) -> dict[str, ControllerService]:
        """The running controllers' services, by node name."""
        return {n: controller_of(self.cluster.node(n)) for n in self.cluster.controller_names
                if n in self.cluster.running}

    def leader(self) -> tuple[str, ControllerService] | None:
        """The controller that leads now, if any."""
        for name, service in self.controllers().items():
            if service.raft.is_leader:
                return name, service
        return None

    def _watch_elections(self, service: ControllerService) -> None:
        """Note the elections the core reports as a possible message loss."""
        core = service.core
        drain = core.drain

        def drain_and_watch() -> list[Output]:
            outputs = drain()
            self.losses.update(o.info.master_epoch for o in outputs
                               if isinstance(o, Elected) and o.info.possible_message_loss)
            return outputs

        core.drain = drain_and_watch  # type: ignore[method-assign]

    def _arm_leader_kill(self) -> None:
        found = self.leader()
        if found is None:
            raise AssertionError("no controller leads: nothing to arm")
        name, service = found
        propose: Callable = service.raft.propose

        async def propose_then_die(data: bytes, *, timeout: float = 3.0) -> object:
            # The leader proposes the election and is killed at once: the entry
            # may or may not commit.
            if b'"type":"ElectMaster"' in data and not self.leader_killed:
                self.nursery.start_soon(self._kill_leader, name)
            return await propose(data, timeout=timeout)

        service.raft.propose = propose_then_die  # type: ignore[method-assign]

    async def _kill_leader(self, name: str) -> None:
        await self.cluster.kill(name)
        self.leader_killed = True

    # -- actions ---------------------------------------------------------------------------

    async def _perform(self, action: sc.Action) -> object:
        cluster, network = self.cluster, self.network
        if isinstance(action, sc.StartControllers):
            await cluster.start_controllers()
            for service in self.controllers().values():
                self._watch_elections(service)
        elif isinstance(action, sc.StartBroker):
            await cluster.start(action.name)
            self.addresses[action.name] = cluster.broker(action.name).node.address
        elif isinstance(action, sc.KillBroker):
            await cluster.kill(action.name)
        elif isinstance(action, sc.CutFromControllers):
            for controller in cluster.controller_names:
                network.partition(action.name, controller)
        elif isinstance(action, sc.CutReplication):
            for other in cluster.broker_names:
                if other != action.name:
                    network.partition(action.name, f"{other}-ha")
                    network.partition(other, f"{action.name}-ha")
        elif isinstance(action, sc.Heal):
            network.heal()
        elif isinstance(action, sc.SetUncleanElection):
            controllers = ControllerClient(self.client.rpc,
                                           list(cluster.controller_addresses.values()))
            for name in self.controllers():
                await controllers.update_controller_config(
                    cluster.controller_addresses[name],
                    {"enable_elect_unclean_master": action.enabled})
        elif isinstance(action, sc.ArmLeaderKill):
            self._arm_leader_kill()
        elif isinstance(action, sc.PutOne):
            return await self._put(action.name)
        elif isinstance(action, sc.PullOne):
            return await self._pull(action)
        else:
            raise TypeError(f"not an action: {action!r}")
        return None

    async def _put(self, name: str) -> str:
        self._bodies += 1
        body = b"scenario-%d" % self._bodies
        producer = DirectProducer(self.client.rpc, self.addresses[name], timeout=5.0)
        try:
            result = await producer.send(TOPIC, body)
        except SendError as error:
            return ResponseCode(error.code).name
        except RpcError:
            return "NO_ANSWER"
        self.acked.append((result.physical_offset, body))
        return "SUCCESS"

    async def _pull(self, action: sc.PullOne) -> sc.Pulled:
        queue = MessageQueue(TOPIC, BROKER_NAME, action.queue_id)
        fields = pull_header("scenario-reader", queue, action.offset, 32,
                             SubscriptionData.build(TOPIC, "*", 0), suspend_ms=None,
                             with_subscription=True)
        try:
            response = await self.client.rpc.invoke(
                self.addresses[action.name], RequestCode.PULL_MESSAGE, fields, timeout=5.0)
        except RpcError:
            return sc.Pulled("NO_ANSWER")
        return sc.Pulled.of(response.code, response.ext_fields, response.body)

    # -- what it shows ---------------------------------------------------------------------

    def _missing(self, name: str) -> int:
        log = self.cluster.broker(name).log
        lacking = 0
        for offset, body in self.acked:
            try:
                held = offset < log.max_offset and log.read_record(offset).body == body
            except Exception:  # another record's bytes there: not a record start
                held = False
            lacking += not held
        return lacking

    def _name_of(self, broker_id: int) -> str | None:
        """The broker that has ``broker_id``: a running one, else as the controllers know it."""
        cluster = self.cluster
        for name in cluster.running:
            if name in cluster.broker_names and cluster.broker(name).broker_id == broker_id:
                return name
        found = self.leader()
        group = found[1].manager.group(BROKER_NAME) if found is not None else None
        return _name(group.address_of(broker_id)) if group is not None else None

    def snapshot(self) -> sc.ClusterSnapshot:
        """The cluster now."""
        cluster = self.cluster
        brokers = {}
        for name in cluster.broker_names:
            if name not in cluster.running:
                brokers[name] = sc.BrokerView(name, up=False)
                continue
            replicas = cluster.broker(name).replicas
            brokers[name] = sc.BrokerView(
                name, up=True, role=replicas.role.value, epoch=replicas.master_epoch,
                max_offset=cluster.broker(name).log.max_offset, missing=self._missing(name),
                in_sync=frozenset(n for i in replicas.sync_state_set
                                  if (n := self._name_of(i)) is not None))
        now_ms = round(trio.current_time() * 1000)
        epochs = tuple(g.master_epoch for s in self.controllers().values()
                       if (g := s.manager.group(BROKER_NAME)) is not None)
        # The puts go to queue 0 of the topic (``DirectProducer``'s default).
        acked = frozenset(body for _, body in self.acked)
        found = self.leader()
        group = found[1].manager.group(BROKER_NAME) if found is not None else None
        if group is None:
            return sc.ClusterSnapshot(now_ms, brokers, controller_epochs=epochs,
                               loss_reported=frozenset(self.losses),
                               leader_killed=self.leader_killed, acked=acked)
        members = frozenset(n for i in group.sync_state_set
                            if (n := self._name_of(i)) is not None)
        return sc.ClusterSnapshot(now_ms, brokers, master=_name(group.master_address),
                           master_epoch=group.master_epoch, sync_state_set=members,
                           controller_epochs=epochs, loss_reported=frozenset(self.losses),
                           leader_killed=self.leader_killed, acked=acked)


async def run_on_cluster(scenario: sc.Scenario, root: Path) -> ScenarioRun:
    """Run ``scenario`` over a cluster whose nodes keep their data under ``root``."""
    async with open_cluster(root, brokers=scenario.replicas, plugins=controller_plugins(),
                            controller=CONTROLLER, broker=BROKER, store=STORE) as cluster, \
            trio.open_nursery() as nursery:
        client = await cluster.start("client")
        run = await ClusterPump(scenario, cluster, client, nursery)()
        nursery.cancel_scope.cancel()
    return run
