"""The controller client: brokers and administrators talk to the active controller.

Only the Raft leader among the controllers answers requests; the others
answer CONTROLLER_NOT_LEADER with the leader's address. The client keeps
the last leader it found, follows those hints, and otherwise tries every
controller in turn until one answers or the call's deadline passes, so a
call made during a controller leader change simply takes a little longer::

    client = ControllerClient(node.rpc, ["tcp://10.0.0.1:9878", "tcp://10.0.0.2:9878"])
    info = await client.get_replica_info("broker-a")
    info.master_broker_id, info.master_epoch, info.sync_state_set

A refusal raises ``ControllerError`` with the controller's code and
reason; no answer at all raises ``ControllerUnavailable``. Heartbeats go
to every controller (each keeps the brokers' live info, so a new leader
knows at once who is alive). Requests are ``triomq.controller.core.requests``
values, the controller's own vocabulary, written and read by its
``request_frame`` and ``read_reply``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import trio

from triomq.controller.core.codes import RequestCode, ResponseCode
from triomq.controller.core.leader_calls import GiveUp, LeaderCalls, Pause
from triomq.controller.core.requests import (
    AlterSyncStateSet,
    ApplyBrokerId,
    BrokerHeartbeat,
    CleanBrokerData,
    ConfigValues,
    ControllerRequest,
    ElectAnswer,
    ElectMaster,
    GetControllerConfig,
    GetMetadata,
    GetNextBrokerId,
    GetReplicaInfo,
    GetSyncStateData,
    NextBrokerId,
    Payload,
    RegisterBroker,
    SyncStateSet,
    SyncStateTable,
    UpdateControllerConfig,
    read_reply,
    request_frame,
)
from triomq.controller.core.results import SyncStateData
from triomq.controller.core.wire import ControllerMetadata, ReplicaInfo
from triomq.errors import TriomqError
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcClient, RpcError

__all__ = ["ControllerClient", "ControllerError", "ControllerUnavailable"]

logger = logging.getLogger("triomq.controller.client")


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


class ControllerError(TriomqError):
    """The active controller refused a request: ``code`` (a ``ResponseCode``) and ``remark``.

    ``response`` is the whole answer (some refusals carry a body, e.g.
    CONTROLLER_MASTER_STILL_EXIST carries the group's replica info).
    """

    def __init__(self, address: str, request: str, response: RemotingCommand) -> None:
        self.address = address
        self.code = response.code
        self.remark = response.remark or ""
        self.response = response
        super().__init__(f"controller {address}: {request}: {_code_name(self.code)} "
                         f"({self.code}): {self.remark or 'no remark'}")


class ControllerUnavailable(TriomqError):
    """No controller leader answered before the call's deadline."""


class ControllerClient:
    """Calls the active controller among ``addresses`` (see the module docstring).

    ``timeout`` bounds a whole call, retries included; ``attempt_timeout``
    bounds one attempt at one controller; ``retry_interval`` is the pause
    after every controller was tried without an answer.
    """

    def __init__(self, rpc: RpcClient, addresses: Sequence[str], *, timeout: float = 3.0,
                 attempt_timeout: float = 1.0, retry_interval: float = 0.05) -> None:
        self.rpc = rpc
        self.calls = LeaderCalls(addresses, timeout=timeout, attempt_timeout=attempt_timeout,
                                 retry_interval=retry_interval)
        self.addresses = self.calls.addresses
        self.timeout = timeout
        self.attempt_timeout = attempt_timeout
        self.retry_interval = retry_interval

    @property
    def leader(self) -> str | None:
        """The controller that answered last as leader, if any."""
        return self.calls.leader

    # -- the retry loop -----------------------------------------------------------

    async def call(self, code: int, fields: Mapping[str, str] | None = None, body: bytes = b"",
                   *, timeout: float | None = None) -> RemotingCommand:
        """Send a request to the leader and return its answer, whatever its code.

        Follows NOT_LEADER hints and retries across controllers until the
        deadline (``LeaderCall``); raises ``ControllerUnavailable`` then.
        """
        call = self.calls.start(trio.current_time(), timeout)
        while True:
            step = call.next_step(trio.current_time())
            if isinstance(step, GiveUp):
                raise ControllerUnavailable(
                    f"no controller leader among {', '.join(self.addresses)} answered "
                    f"request {_request_name(code)} in time (last: {step.last_error})")
            if isinstance(step, Pause):
                await trio.sleep(step.duration)
                continue
            try:
                response = await self.rpc.invoke(step.address, code, fields, body,
                                                 timeout=step.timeout)
            except RpcError as exc:
                call.failed(step.address, str(exc))
                continue
            if response.code != ResponseCode.CONTROLLER_NOT_LEADER:
                call.answered(step.address)
                return response
            call.not_leader(step.address, response.ext_fields.get("leaderAddress", ""))

    async def answer(self, request: ControllerRequest) -> tuple[RemotingCommand, Payload | None]:
        """Make ``request`` to the leader: its answer, whatever its code, and the answer's
        payload (``read_reply``: None for a refusal)."""
        _code, response, payload = await self._ask(request)
        return response, payload

    async def request(self, request: ControllerRequest) -> Payload | None:
        """Make ``request`` to the leader; its payload. ``ControllerError`` for a refusal
        (ELECT_MASTER's CONTROLLER_MASTER_STILL_EXIST is an answer: the group's master)."""
        code, response, payload = await self._ask(request)
        if response.code != ResponseCode.SUCCESS and payload is None:
            raise ControllerError(self.leader or "?", code.name, response)
        return payload

    async def _ask(self, request: ControllerRequest
                   ) -> tuple[RequestCode, RemotingCommand, Payload | None]:
        code, fields, body = request_frame(request)
        response = await self.call(code, fields, body)
        return code, response, read_reply(request, response)

    # -- registration -------------------------------------------------------------

    async def get_next_broker_id(self, cluster_name: str, broker_name: str) -> int:
        """GET_NEXT_BROKER_ID: the id a new replica should apply for."""
        answer = await self.request(GetNextBrokerId(cluster_name, broker_name))
        assert isinstance(answer, NextBrokerId)
        return answer.next_broker_id

    async def apply_broker_id(self, cluster_name: str, broker_name: str, broker_id: int,
                              register_check_code: str) -> None:
        """APPLY_BROKER_ID: claim ``broker_id``, proven later by ``register_check_code``
        (``<broker address>;<time>``)."""
        await self.request(ApplyBrokerId(cluster_name, broker_name, broker_id,
                                         register_check_code))

    async def register_broker(self, cluster_name: str, broker_name: str, broker_id: int,
                              broker_address: str) -> ReplicaInfo:
        """REGISTER_BROKER: (re)join; the answer names the group's alive master, if any."""
        answer = await self.request(RegisterBroker(cluster_name, broker_name, broker_id,
                                                   broker_address))
        assert isinstance(answer, ReplicaInfo)
        return answer

    async def heartbeat(self, heartbeat: BrokerHeartbeat, *, address: str) -> int:
        """``heartbeat`` to the controller at ``address``; its response code.

        Every controller records heartbeats, so brokers send one to each.
        Raises ``RpcError`` when that controller does not answer.
        """
        code, fields, _ = request_frame(heartbeat)
        response = await self.rpc.invoke(address, code, fields, timeout=self.attempt_timeout)
        return response.code

    # -- replica info and elections -------------------------------------------------

    async def alter_sync_state_set(self, broker_name: str, master_broker_id: int,
                                   master_epoch: int, sync_state_set_epoch: int,
                                   new_sync_state_set: Iterable[int]
                                   ) -> tuple[frozenset[int], int]:
        """ALTER_SYNC_STATE_SET: the applied set and its new epoch."""
        answer = await self.request(AlterSyncStateSet(
            broker_name, master_broker_id, master_epoch, sync_state_set_epoch,
            frozenset(new_sync_state_set)))
        assert isinstance(answer, SyncStateSet)
        return answer.members, answer.epoch

    async def elect_master(self, cluster_name: str, broker_name: str, *,
                           broker_id: int | None = None, designate: bool = False
                           ) -> ReplicaInfo:
        """ELECT_MASTER: by a broker that found no master (its own id) or an
        administrator designating ``broker_id``; the group after the election.

        CONTROLLER_MASTER_STILL_EXIST is an answer, not an error: the group's
        current master is returned.
        """
        answer = await self.request(ElectMaster(cluster_name, broker_name, broker_id,
                                                designate))
        assert isinstance(answer, ElectAnswer)
        return answer.info

    async def get_replica_info(self, broker_name: str) -> ReplicaInfo:
        """GET_REPLICA_INFO: master, epochs, SyncStateSet and replicas of one group."""
        answer = await self.request(GetReplicaInfo(broker_name))
        assert isinstance(answer, ReplicaInfo)
        return answer

    async def get_sync_state_data(self, broker_names: Iterable[str]
                                  ) -> tuple[SyncStateData, ...]:
        """GET_SYNC_STATE_DATA: the named groups that exist, sorted by name."""
        answer = await self.request(GetSyncStateData(tuple(broker_names)))
        assert isinstance(answer, SyncStateTable)
        return answer.groups

    async def get_metadata(self, address: str | None = None) -> ControllerMetadata:
        """GET_METADATA_INFO from ``address``, else from the first controller that answers
        (every controller does, with its own view)."""
        if address is None:
            answer = await self.request(GetMetadata())
        else:
            answer = await self._at(address, GetMetadata())
        assert isinstance(answer, ControllerMetadata)
        return answer

    async def clean_broker_data(self, cluster_name: str, broker_name: str, *,
                                broker_ids: Iterable[int] | None = None,
                                clean_living_broker: bool = False) -> None:
        """CLEAN_BROKER_DATA: forget some replicas of a group, or (no ids) the whole group."""
        await self.request(CleanBrokerData(
            cluster_name, broker_name, None if broker_ids is None else frozenset(broker_ids),
            clean_living_broker))

    # -- controller configuration ---------------------------------------------------

    async def get_controller_config(self, address: str) -> dict[str, str]:
        """GET_CONTROLLER_CONFIG of the controller at ``address``: property names and
        values (``triomq.controller.core.config.PROPERTY_NAMES``)."""
        answer = await self._at(address, GetControllerConfig())
        assert isinstance(answer, ConfigValues)
        return dict(answer.properties)

    async def update_controller_config(self, address: str, values: Mapping[str, Any]) -> None:
        """UPDATE_CONTROLLER_CONFIG of the controller at ``address`` (not replicated):
        ``[controller]`` keys and values, sent as properties."""
        await self._at(address, UpdateControllerConfig(values))

    async def _at(self, address: str, request: ControllerRequest) -> Payload | None:
        """``request`` to the controller at ``address`` alone; its payload, or
        ``ControllerError``."""
        code, fields, body = request_frame(request)
        response = await self.rpc.invoke(address, code, fields, body,
                                         timeout=self.attempt_timeout)
        if response.code != ResponseCode.SUCCESS:
            raise ControllerError(address, code.name, response)
        return read_reply(request, response)


def _request_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)
