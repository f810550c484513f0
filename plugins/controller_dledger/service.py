"""The controller service: the replicas-info state machine on Raft, serving brokers.

A controller node runs one Raft member (``framework.consensus.node``) whose
state machine is ``ReplicasStateMachine``; the Raft leader is the *active*
controller. Request flow on the leader: the request's header is decoded
(``framework.controller.wire``), the ``ReplicasInfoManager`` validates it
against the applied state and returns the events to commit; each event is
proposed and the answer goes out once it is applied here. State-changing
requests are handled one at a time (``_write_lock``), after a read barrier
at the start of each leader term, so each one sees its predecessors'
effects. Other controllers answer CONTROLLER_NOT_LEADER with the leader's
id and address.

Every controller records broker heartbeats (brokers send them to all), so a
controller that becomes leader already knows who is alive. The leader scans
every ``scan_not_active_broker_interval``: a group whose master went silent,
or that has no master, gets an election through the configured election
policy; after a committed election the group's brokers are told with a
oneway NOTIFY_BROKER_ROLE_CHANGED (they also poll), through an RPC client of
the service's own whose reconnect backoff stays short (``NOTIFY_BACKOFF``).

Reach a node's running controller with ``controller_of(node)``.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from framework.consensus.node import NotLeader, ProposalFailed, RaftNode, open_raft_node
from framework.controller import (
    ControllerResult,
    ElectionPolicy,
    RequestCode,
    ResponseCode,
    encode_event,
)
from framework.controller.config import ControllerConfig
from framework.controller.election import LiveInfoLookup
from framework.controller.heartbeat import BrokerHeartbeatTable
from framework.controller.wire import (
    ControllerMetadata,
    Header,
    ReplicaInfo,
    WireError,
    decode_config,
    encode_config,
    encode_metadata,
    encode_replica_info,
    encode_replica_infos,
)
from framework.errors import ConfigError, PluginError, TriomqError
from framework.protocol.remoting import RemotingCommand
from framework.rpc import Backoff, RpcClient, RpcConnection, RpcError, RpcServer, open_rpc_client
from framework.settings import from_mapping
from plugins.controller_dledger.state_machine import ReplicasStateMachine

if TYPE_CHECKING:
    from framework.runtime import Node

__all__ = ["MUTABLE_KEYS", "ControllerService", "controller_of", "controller_service"]

logger = logging.getLogger("triomq.controller")

Code = ResponseCode
Handler = Callable[[RemotingCommand, RpcConnection], Awaitable[RemotingCommand]]

#: Keys UPDATE_CONTROLLER_CONFIG may change at run time (on one controller).
MUTABLE_KEYS = frozenset({
    "scan_not_active_broker_interval", "broker_not_active_timeout",
    "enable_elect_unclean_master", "election_policy", "notify_broker_role_changed",
    "request_timeout",
})

#: Reconnect backoff of the notification client: a broker that was down and came
#: back must hear of an election at once, not after the node client's backoff.
NOTIFY_BACKOFF = Backoff(initial=0.01, maximum=0.1)

_services: weakref.WeakKeyDictionary[Node, ControllerService] = weakref.WeakKeyDictionary()


def controller_of(node: Node) -> ControllerService:
    """The controller running in ``node``; ``PluginError`` if it runs none."""
    try:
        return _services[node]
    except KeyError:
        raise PluginError(f"node {node.name!r} runs no controller") from None


def _reply(code: int, remark: str = "", body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.response(code, remark=remark or None, body=body)


class _Refused(TriomqError):
    """A request ends early with ``response`` (not leader, commit failed, bad header)."""

    def __init__(self, response: RemotingCommand) -> None:
        self.response = response
        super().__init__(response.remark or str(response.code))


class ControllerService:
    """One controller: request handlers, heartbeat table, inactive-broker scan."""

    def __init__(self, node: Node, config: ControllerConfig, raft: RaftNode,
                 machine: ReplicasStateMachine, nursery: trio.Nursery,
                 notify_rpc: RpcClient) -> None:
        self.node = node
        self.notify_rpc = notify_rpc
        self.config = config
        self.raft = raft
        self.machine = machine
        self.manager = machine.manager
        self.heartbeats = BrokerHeartbeatTable()
        self.policy: ElectionPolicy = node.plugins.election_policy(config.election_policy)
        #: Elections committed by this controller (for tests and status).
        self.elections = 0
        self._nursery = nursery
        self._write_lock = trio.Lock()
        self._caught_up_term = -1

    # -- time, leadership, commits ------------------------------------------------

    @staticmethod
    def now_ms() -> int:
        """Trio's clock in ms (the heartbeat table's time base)."""
        return round(trio.current_time() * 1000)

    def _live_info(self, cluster_name: str, broker_name: str) -> LiveInfoLookup:
        return self.heartbeats.live_info(self.now_ms(), self.config.broker_not_active_timeout,
                                         cluster_name, broker_name)

    def _group_live_info(self, broker_name: str) -> LiveInfoLookup:
        group = self.manager.group(broker_name)
        cluster = group.cluster_name if group is not None else ""
        return self._live_info(cluster, broker_name)

    def not_leader(self) -> RemotingCommand:
        """CONTROLLER_NOT_LEADER naming the leader this controller knows of."""
        leader_id, address = self.raft.leader_id, self.raft.leader_address
        return RemotingCommand.response(
            Code.CONTROLLER_NOT_LEADER,
            remark=f"controller {self.raft.node_id} is not the leader; the leader is "
                   f"{f'{leader_id} at {address}' if leader_id else 'unknown'}",
            ext_fields={"leaderId": str(leader_id or ""), "leaderAddress": address or ""})

    async def _leader_barrier(self, *, every_time: bool = False) -> None:
        """Refuse unless leader; make the applied state current (once per term, or always)."""
        if not self.raft.is_leader:
            raise _Refused(self.not_leader())
        term = self.raft.term
        if every_time or term != self._caught_up_term:
            try:
                await self.raft.read_index(timeout=self.config.request_timeout / 1000)
            except NotLeader:
                raise _Refused(self.not_leader()) from None
            except trio.TooSlowError:
                raise _Refused(_reply(Code.CONTROLLER_JRAFT_INTERNAL_ERROR,
                                      "the read barrier timed out")) from None
            if not every_time:
                self._caught_up_term = term

    async def _commit(self, result: ControllerResult) -> None:
        """Propose ``result``'s events in order and wait until each is applied here."""
        for event in result.events:
            try:
                changed = await self.raft.propose(
                    encode_event(event), timeout=self.config.request_timeout / 1000)
            except NotLeader:
                raise _Refused(self.not_leader()) from None
            except ProposalFailed as exc:
                raise _Refused(_reply(Code.CONTROLLER_JRAFT_INTERNAL_ERROR,
                                      f"not committed: {exc}")) from None
            except trio.TooSlowError:
                raise _Refused(_reply(Code.CONTROLLER_JRAFT_INTERNAL_ERROR,
                                      "not committed in time; it may still take effect")) from None
            if not changed:
                raise _Refused(_reply(
                    Code.CONTROLLER_INVALID_REQUEST,
                    f"{type(event).__name__} no longer applied when committed (the state "
                    "changed meanwhile); retry"))

    # -- handlers -----------------------------------------------------------------

    def register(self, server: RpcServer) -> None:
        """Register the controller's request handlers on ``server``."""
        handlers: dict[int, Handler] = {
            RequestCode.GET_NEXT_BROKER_ID: self.get_next_broker_id,
            RequestCode.APPLY_BROKER_ID: self.apply_broker_id,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
            RequestCode.ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
            RequestCode.ELECT_MASTER: self.elect_master_request,
            RequestCode.GET_REPLICA_INFO: self.get_replica_info,
            RequestCode.GET_METADATA_INFO: self.get_metadata,
            RequestCode.GET_SYNC_STATE_DATA: self.get_sync_state_data,
            RequestCode.CLEAN_BROKER_DATA: self.clean_broker_data,
            RequestCode.GET_CONTROLLER_CONFIG: self.get_controller_config,
            RequestCode.UPDATE_CONTROLLER_CONFIG: self.update_controller_config,
        }
        for code, handler in handlers.items():
            server.register(code, self._guarded(RequestCode(code).name, handler))

    def _guarded(self, name: str, handler: Handler) -> Handler:
        async def handle(request: RemotingCommand, peer: RpcConnection) -> RemotingCommand:
            try:
                response = await handler(request, peer)
            except _Refused as refused:
                response = refused.response
            except WireError as exc:
                response = _reply(Code.CONTROLLER_INVALID_REQUEST, str(exc))
            if response.code not in (Code.SUCCESS, Code.CONTROLLER_NOT_LEADER):
                logger.info("controller %s: %s from %s refused: %s (%d): %s",
                            self.raft.node_id, name, peer.peer, _code_name(response.code),
                            response.code, response.remark)
            return response

        return handle

    @staticmethod
    def _answer(result: ControllerResult, body: bytes = b"") -> RemotingCommand:
        return _reply(result.code, result.remark, body)

    async def get_next_broker_id(self, request: RemotingCommand, peer: RpcConnection
                                 ) -> RemotingCommand:
        """GET_NEXT_BROKER_ID."""
        header = Header(request.ext_fields, "GET_NEXT_BROKER_ID")
        cluster, name = header.string("clusterName"), header.string("brokerName")
        await self._leader_barrier(every_time=True)
        result = self.manager.get_next_broker_id(cluster, name)
        if not result.ok:
            return self._answer(result)
        return _reply(Code.SUCCESS, body=encode_config({"nextBrokerId":
                                                        result.payload.next_broker_id}))

    async def apply_broker_id(self, request: RemotingCommand, peer: RpcConnection
                              ) -> RemotingCommand:
        """APPLY_BROKER_ID."""
        header = Header(request.ext_fields, "APPLY_BROKER_ID")
        args = (header.string("clusterName"), header.string("brokerName"),
                header.integer("appliedBrokerId"), header.string("brokerAddress"),
                header.string("registerCheckCode"))
        async with self._write_lock:
            await self._leader_barrier()
            result = self.manager.apply_broker_id(*args)
            await self._commit(result)
        return self._answer(result)

    async def register_broker(self, request: RemotingCommand, peer: RpcConnection
                              ) -> RemotingCommand:
        """REGISTER_BROKER: the answer names the alive master, if any."""
        header = Header(request.ext_fields, "REGISTER_BROKER")
        cluster, name = header.string("clusterName"), header.string("brokerName")
        broker_id, address = header.integer("brokerId"), header.string("brokerAddress")
        async with self._write_lock:
            await self._leader_barrier()
            result = self.manager.register_broker(cluster, name, broker_id, address,
                                                  self._live_info(cluster, name))
            await self._commit(result)
        if not result.ok:
            return self._answer(result)
        self.heartbeats.heartbeat(self.now_ms(), cluster, name, broker_id, address)
        payload = result.payload
        group = self.manager.group(name)
        info = ReplicaInfo(name, payload.master_broker_id, payload.master_address,
                           payload.master_epoch, payload.sync_state_set,
                           payload.sync_state_set_epoch,
                           tuple(sorted(group.addresses.items())) if group else ())
        return _reply(Code.SUCCESS, body=encode_replica_info(info))

    async def broker_heartbeat(self, request: RemotingCommand, peer: RpcConnection
                               ) -> RemotingCommand:
        """BROKER_HEARTBEAT: any controller records it (after checking the sender)."""
        header = Header(request.ext_fields, "BROKER_HEARTBEAT")
        cluster, name = header.string("clusterName"), header.string("brokerName")
        broker_id = header.integer("brokerId")
        address = header.string("brokerAddr")
        live = {key: header.integer(field) for key, field in (
            ("epoch", "epoch"), ("max_offset", "maxOffset"),
            ("confirm_offset", "confirmOffset"), ("election_priority", "electionPriority"))}
        timeout = header.optional_integer("heartbeatTimeoutMills")
        result = self.manager.check_heartbeat(cluster, name, broker_id)
        if not result.ok:
            return self._answer(result)
        self.heartbeats.heartbeat(self.now_ms(), cluster, name, broker_id, address,
                                  heartbeat_timeout_ms=timeout, **live)
        return _reply(Code.SUCCESS)

    async def alter_sync_state_set(self, request: RemotingCommand, peer: RpcConnection
                                   ) -> RemotingCommand:
        """ALTER_SYNC_STATE_SET from a group's master, fenced by both epochs."""
        header = Header(request.ext_fields, "ALTER_SYNC_STATE_SET")
        name = header.string("brokerName")
        master, master_epoch = header.integer("masterBrokerId"), header.integer("masterEpoch")
        sync_state_set_epoch = header.integer("syncStateSetEpoch")
        new_set = header.id_set("newSyncStateSet") or frozenset()
        async with self._write_lock:
            await self._leader_barrier()
            result = self.manager.alter_sync_state_set(
                name, master, master_epoch, new_set, sync_state_set_epoch,
                self._group_live_info(name))
            await self._commit(result)
        if not result.ok:
            return self._answer(result)
        payload = result.payload
        return _reply(Code.SUCCESS, body=encode_config({
            "syncStateSet": sorted(payload.sync_state_set),
            "syncStateSetEpoch": payload.sync_state_set_epoch}))

    async def elect_master_request(self, request: RemotingCommand, peer: RpcConnection
                                   ) -> RemotingCommand:
        """ELECT_MASTER from a broker (its own id) or an administrator (designated id)."""
        header = Header(request.ext_fields, "ELECT_MASTER")
        name, cluster = header.string("brokerName"), header.string("clusterName")
        broker_id = header.optional_integer("brokerId")
        designate = header.boolean("designateElect")
        group = self.manager.group(name)
        if group is not None and group.cluster_name != cluster:
            return _reply(Code.CONTROLLER_INVALID_REQUEST,
                          f"broker group {name!r} belongs to cluster {group.cluster_name!r}, "
                          f"not {cluster!r}")
        result, info = await self.elect(name, broker_id=broker_id, designate=designate)
        body = encode_replica_info(info) if info is not None else b""
        return self._answer(result, body)

    async def elect(self, broker_name: str, *, broker_id: int | None = None,
                    designate: bool = False) -> tuple[ControllerResult, ReplicaInfo | None]:
        """Run one election for a group: validate, commit, notify the group's brokers.

        Returns the result and the group's replica info after it (``None``
        for an unknown group).
        """
        async with self._write_lock:
            await self._leader_barrier()
            result = self.manager.elect_master(
                broker_name, self._group_live_info(broker_name), broker_id=broker_id,
                designate=designate, policy=self.policy,
                enable_elect_unclean_master=self.config.enable_elect_unclean_master)
            await self._commit(result)
        group = self.manager.group(broker_name)
        if group is None:
            return result, None
        loss = result.payload is not None and result.payload.possible_message_loss
        info = ReplicaInfo.of_group(group, possible_message_loss=loss)
        if result.events:
            self.elections += 1
            if info.master_broker_id is None:
                outcome = f"no master in epoch {info.master_epoch}: {result.remark}"
            else:
                outcome = f"master {info.master_broker_id} elected in epoch {info.master_epoch}"
                if result.remark:
                    outcome += f" ({result.remark})"
            logger.warning("controller %s: group %r: %s", self.raft.node_id, broker_name,
                           outcome)
            if self.config.notify_broker_role_changed:
                self._notify(info)
        return result, info

    def _notify(self, info: ReplicaInfo) -> None:
        body = encode_replica_info(info)
        for _, address in info.replicas:
            self._nursery.start_soon(self._notify_one, address, body)

    async def _notify_one(self, address: str, body: bytes) -> None:
        try:
            await self.notify_rpc.invoke_oneway(address, RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
                                              body=body, timeout=1.0)
        except RpcError as exc:
            logger.debug("notifying %s of a role change failed: %s", address, exc)

    async def get_replica_info(self, request: RemotingCommand, peer: RpcConnection
                               ) -> RemotingCommand:
        """GET_REPLICA_INFO (linearizable)."""
        name = Header(request.ext_fields, "GET_REPLICA_INFO").string("brokerName")
        await self._leader_barrier(every_time=True)
        group = self.manager.group(name)
        if group is None:
            return _reply(Code.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                          f"broker group {name!r} is not registered")
        return _reply(Code.SUCCESS, body=encode_replica_info(ReplicaInfo.of_group(group)))

    async def get_sync_state_data(self, request: RemotingCommand, peer: RpcConnection
                                  ) -> RemotingCommand:
        """GET_SYNC_STATE_DATA: the named groups (none named: all)."""
        raw = request.ext_fields.get("brokerNames", "")
        await self._leader_barrier(every_time=True)
        names = [n for n in raw.split(";") if n] or list(self.manager.groups)
        groups = [self.manager.group(n) for n in sorted(set(names))]
        return _reply(Code.SUCCESS, body=encode_replica_infos(
            ReplicaInfo.of_group(g) for g in groups if g is not None))

    async def get_metadata(self, request: RemotingCommand, peer: RpcConnection
                           ) -> RemotingCommand:
        """GET_METADATA_INFO: any controller answers with its view."""
        return _reply(Code.SUCCESS, body=encode_metadata(self.metadata()))

    def metadata(self) -> ControllerMetadata:
        """This controller's Raft view and its applied groups."""
        return ControllerMetadata(
            controller_id=str(self.raft.node_id),
            leader_id=str(self.raft.leader_id or ""),
            leader_address=self.raft.leader_address or "",
            term=self.raft.term,
            peers=tuple((str(k), v) for k, v in sorted(self.config.peers.items())),
            groups=tuple(ReplicaInfo.of_group(g) for _, g in sorted(self.manager.groups.items())),
        )

    async def clean_broker_data(self, request: RemotingCommand, peer: RpcConnection
                                ) -> RemotingCommand:
        """CLEAN_BROKER_DATA."""
        header = Header(request.ext_fields, "CLEAN_BROKER_DATA")
        cluster, name = header.string("clusterName"), header.string("brokerName")
        ids = header.id_set("brokerIdSetToClean")
        clean_living = header.boolean("isCleanLivingBroker")
        async with self._write_lock:
            await self._leader_barrier()
            result = self.manager.clean_broker_data(
                cluster, name, self._live_info(cluster, name), broker_ids=ids,
                clean_living_broker=clean_living)
            await self._commit(result)
        if result.ok:
            self.heartbeats.remove(cluster, name, ids)
        return self._answer(result)

    async def get_controller_config(self, request: RemotingCommand, peer: RpcConnection
                                    ) -> RemotingCommand:
        """GET_CONTROLLER_CONFIG: this controller's settings."""
        values = attrs.asdict(self.config)
        values["peers"] = {str(k): v for k, v in self.config.peers.items()}
        return _reply(Code.SUCCESS, body=encode_config(values))

    async def update_controller_config(self, request: RemotingCommand, peer: RpcConnection
                                       ) -> RemotingCommand:
        """UPDATE_CONTROLLER_CONFIG: change ``MUTABLE_KEYS`` on this controller."""
        values: dict[str, Any] = decode_config(request.body)
        fixed = sorted(set(values) - MUTABLE_KEYS)
        if fixed:
            return _reply(Code.CONTROLLER_INVALID_REQUEST,
                          f"keys {fixed} cannot change at run time; mutable keys: "
                          f"{sorted(MUTABLE_KEYS)}")
        current = {f.name: getattr(self.config, f.name) for f in attrs.fields(ControllerConfig)}
        try:
            config = from_mapping(ControllerConfig, {**current, **values}, "controller")
            policy = self.node.plugins.election_policy(config.election_policy)
        except (ConfigError, PluginError) as exc:
            return _reply(Code.CONTROLLER_INVALID_REQUEST, str(exc))
        self.config, self.policy = config, policy
        logger.info("controller %s: configuration updated: %s", self.raft.node_id, values)
        return _reply(Code.SUCCESS)

    # -- the inactive-broker scan ---------------------------------------------------

    async def scan_loop(self) -> None:
        """On the leader, every scan interval: elect for groups whose master is gone."""
        leader_term = -1
        while True:
            await trio.sleep(self.config.scan_not_active_broker_interval / 1000)
            if not self.raft.is_leader:
                continue
            if self.raft.term != leader_term:
                leader_term = self.raft.term
                self.heartbeats.expect_masters(self.now_ms(), self.manager.groups.values())
            await self.scan()

    async def scan(self) -> None:
        """One scan: drop silent brokers, elect where the master is gone."""
        inactive = self.heartbeats.scan(self.now_ms(), self.config.broker_not_active_timeout)
        for record in inactive:
            logger.info("controller %s: broker %s/%d at %s is inactive", self.raft.node_id,
                        record.broker_name, record.broker_id, record.broker_address)
        for name, group in sorted(self.manager.groups.items()):
            master = group.master_broker_id
            master_gone = master is not None and not self.heartbeats.is_active(
                self.now_ms(), self.config.broker_not_active_timeout, group.cluster_name,
                name, master)
            if master_gone or (master is None and group.master_epoch > 0):
                try:
                    await self.elect(name)
                except _Refused as refused:
                    logger.info("controller %s: election for %r not done: %s",
                                self.raft.node_id, name, refused.response.remark)


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


async def controller_service(node: Node, *,
                             task_status: trio.TaskStatus[ControllerService]
                             = trio.TASK_STATUS_IGNORED) -> None:
    """Run ``node.config.controller``'s controller in ``node`` until cancelled."""
    config: ControllerConfig = node.config.controller
    raft_config = config.raft_config()
    node.plugins.election_policy(config.election_policy)
    machine = ReplicasStateMachine()
    async with (
        open_raft_node(node, raft_config, machine) as raft,
        open_rpc_client(node.connect, backoff=NOTIFY_BACKOFF) as notify_rpc,
        trio.open_nursery() as nursery,
    ):
        service = ControllerService(node, config, raft, machine, nursery, notify_rpc)
        service.register(node.rpc_server)
        _services[node] = service
        try:
            nursery.start_soon(service.scan_loop)
            task_status.started(service)
            await trio.sleep_forever()
        finally:
            _services.pop(node, None)
