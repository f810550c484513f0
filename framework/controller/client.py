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
knows at once who is alive). The encodings are ``triomq.controller.wire``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import trio

from triomq.controller.codes import RequestCode, ResponseCode
from triomq.controller.config import to_properties
from triomq.controller.leader_calls import GiveUp, LeaderCalls, Pause
from triomq.controller.results import SyncStateData
from triomq.controller.wire import (
    ControllerMetadata,
    ReplicaInfo,
    WireError,
    decode_replica_info,
    decode_sync_state_data,
    join_ids,
    load_body,
    read_elect_answer,
    read_metadata,
)
from triomq.errors import TriomqError
from triomq.protocol.java_properties import PropertiesError, dump_properties, load_properties
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

    async def _request(self, code: RequestCode, fields: Mapping[str, str] | None = None,
                       body: bytes = b"", *, ok: Iterable[int] = ()) -> RemotingCommand:
        response = await self.call(code, fields, body)
        if response.code != ResponseCode.SUCCESS and response.code not in set(ok):
            raise ControllerError(self.leader or "?", code.name, response)
        return response

    # -- registration -------------------------------------------------------------

    async def get_next_broker_id(self, cluster_name: str, broker_name: str) -> int:
        """GET_NEXT_BROKER_ID: the id a new replica should apply for."""
        response = await self._request(RequestCode.GET_NEXT_BROKER_ID, {
            "clusterName": cluster_name, "brokerName": broker_name})
        reader = load_body(response.body, "GET_NEXT_BROKER_ID response")
        reader.expect_keys({"nextBrokerId"})
        return reader.integer("nextBrokerId")

    async def apply_broker_id(self, cluster_name: str, broker_name: str, broker_id: int,
                              broker_address: str, register_check_code: str) -> None:
        """APPLY_BROKER_ID: claim ``broker_id``, proven later by ``register_check_code``."""
        await self._request(RequestCode.APPLY_BROKER_ID, {
            "clusterName": cluster_name, "brokerName": broker_name,
            "appliedBrokerId": str(broker_id), "registerCheckCode": register_check_code,
            "brokerAddress": broker_address})

    async def register_broker(self, cluster_name: str, broker_name: str, broker_id: int,
                              broker_address: str) -> ReplicaInfo:
        """REGISTER_BROKER: (re)join; the answer names the group's alive master, if any."""
        response = await self._request(RequestCode.REGISTER_BROKER, {
            "clusterName": cluster_name, "brokerName": broker_name,
            "brokerId": str(broker_id), "brokerAddress": broker_address})
        return decode_replica_info(response.body)

    async def heartbeat(self, cluster_name: str, broker_name: str, broker_id: int,
                        broker_address: str, *, epoch: int, max_offset: int,
                        confirm_offset: int, election_priority: int = 0,
                        heartbeat_timeout_ms: int | None = None,
                        address: str) -> int:
        """BROKER_HEARTBEAT with live info to the controller at ``address``; its response code.

        Every controller records heartbeats, so brokers send one to each.
        Raises ``RpcError`` when that controller does not answer.
        """
        fields = {
            "clusterName": cluster_name, "brokerName": broker_name, "brokerId": str(broker_id),
            "brokerAddr": broker_address, "epoch": str(epoch), "maxOffset": str(max_offset),
            "confirmOffset": str(max(confirm_offset, 0)),
            "electionPriority": str(election_priority),
        }
        if heartbeat_timeout_ms is not None:
            fields["heartbeatTimeoutMills"] = str(heartbeat_timeout_ms)
        response = await self.rpc.invoke(address, RequestCode.BROKER_HEARTBEAT, fields,
                                         timeout=self.attempt_timeout)
        return response.code

    # -- replica info and elections -------------------------------------------------

    async def alter_sync_state_set(self, broker_name: str, master_broker_id: int,
                                   master_epoch: int, sync_state_set_epoch: int,
                                   new_sync_state_set: Iterable[int]
                                   ) -> tuple[frozenset[int], int]:
        """ALTER_SYNC_STATE_SET: the applied set and its new epoch."""
        response = await self._request(RequestCode.ALTER_SYNC_STATE_SET, {
            "brokerName": broker_name, "masterBrokerId": str(master_broker_id),
            "masterEpoch": str(master_epoch), "syncStateSetEpoch": str(sync_state_set_epoch),
            "newSyncStateSet": join_ids(new_sync_state_set)})
        reader = load_body(response.body, "ALTER_SYNC_STATE_SET response")
        reader.expect_keys({"syncStateSet", "syncStateSetEpoch"})
        return reader.id_set("syncStateSet"), reader.integer("syncStateSetEpoch")

    async def elect_master(self, cluster_name: str, broker_name: str, *,
                           broker_id: int | None = None, designate: bool = False
                           ) -> ReplicaInfo:
        """ELECT_MASTER: by a broker that found no master (its own id) or an
        administrator designating ``broker_id``; the group after the election.

        CONTROLLER_MASTER_STILL_EXIST is an answer, not an error: the group's
        current master is returned.
        """
        fields = {"clusterName": cluster_name, "brokerName": broker_name,
                  "designateElect": "true" if designate else "false"}
        if broker_id is not None:
            fields["brokerId"] = str(broker_id)
        response = await self._request(RequestCode.ELECT_MASTER, fields,
                                       ok={ResponseCode.CONTROLLER_MASTER_STILL_EXIST})
        return read_elect_answer(response.ext_fields, response.body)

    async def get_replica_info(self, broker_name: str) -> ReplicaInfo:
        """GET_REPLICA_INFO: master, epochs, SyncStateSet and replicas of one group."""
        response = await self._request(RequestCode.GET_REPLICA_INFO, {"brokerName": broker_name})
        return decode_replica_info(response.body)

    async def get_sync_state_data(self, broker_names: Iterable[str]
                                  ) -> tuple[SyncStateData, ...]:
        """GET_SYNC_STATE_DATA: the named groups that exist, sorted by name."""
        response = await self._request(
            RequestCode.GET_SYNC_STATE_DATA,
            body=json.dumps(sorted(set(broker_names))).encode())
        return decode_sync_state_data(response.body)

    async def get_metadata(self, address: str | None = None) -> ControllerMetadata:
        """GET_METADATA_INFO from ``address``, else from the first controller that answers
        (every controller does, with its own view)."""
        if address is None:
            response = await self.call(RequestCode.GET_METADATA_INFO)
        else:
            response = await self.rpc.invoke(address, RequestCode.GET_METADATA_INFO,
                                             timeout=self.attempt_timeout)
        if response.code != ResponseCode.SUCCESS:
            raise ControllerError(address or self.leader or "?", "GET_METADATA_INFO", response)
        return read_metadata(response.ext_fields)

    async def clean_broker_data(self, cluster_name: str, broker_name: str, *,
                                broker_ids: Iterable[int] | None = None,
                                clean_living_broker: bool = False) -> None:
        """CLEAN_BROKER_DATA: forget some replicas of a group, or (no ids) the whole group."""
        fields = {"clusterName": cluster_name, "brokerName": broker_name,
                  "isCleanLivingBroker": "true" if clean_living_broker else "false"}
        if broker_ids is not None:
            fields["brokerControllerIdsToClean"] = join_ids(broker_ids)
        await self._request(RequestCode.CLEAN_BROKER_DATA, fields)

    # -- controller configuration ---------------------------------------------------

    async def get_controller_config(self, address: str) -> dict[str, str]:
        """GET_CONTROLLER_CONFIG of the controller at ``address``: property names and
        values (``triomq.controller.config.PROPERTY_NAMES``)."""
        response = await self.rpc.invoke(address, RequestCode.GET_CONTROLLER_CONFIG,
                                         timeout=self.attempt_timeout)
        if response.code != ResponseCode.SUCCESS:
            raise ControllerError(address, "GET_CONTROLLER_CONFIG", response)
        try:
            return load_properties(response.body)
        except PropertiesError as exc:
            raise WireError(f"GET_CONTROLLER_CONFIG from {address}: {exc}") from None

    async def update_controller_config(self, address: str, values: Mapping[str, Any]) -> None:
        """UPDATE_CONTROLLER_CONFIG of the controller at ``address`` (not replicated):
        ``[controller]`` keys and values, sent as properties."""
        response = await self.rpc.invoke(
            address, RequestCode.UPDATE_CONTROLLER_CONFIG,
            body=dump_properties(to_properties(values)), timeout=self.attempt_timeout)
        if response.code != ResponseCode.SUCCESS:
            raise ControllerError(address, "UPDATE_CONTROLLER_CONFIG", response)


def _request_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)
