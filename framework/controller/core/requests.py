"""Controller requests and replies as values, and their remoting frames.

The controller service's core (``service_core``) takes a request as one of
the classes here and answers with a ``Reply``; ``decode_request`` reads
them from a remoting command (header keys and bodies as ``wire`` lists
them) and ``reply_command`` writes a reply back. The other side, brokers
and administrators (``triomq.controller.client``, the broker's
controller-mode flow and the cluster simulation), sends the same values:
``request_frame`` writes one as its remoting request and ``read_reply``
reads the answer's payload back as the core's ``Payload``. A request whose header or
body does not decode becomes ``Malformed`` and is answered
CONTROLLER_INVALID_REQUEST by the core, like any other refusal (an
UPDATE_CONTROLLER_CONFIG naming a black-listed key: NO_PERMISSION, as
RocketMQ answers it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from triomq.controller.core.codes import RequestCode, ResponseCode
from triomq.controller.core.config import BLACK_LIST, from_properties, to_properties
from triomq.controller.core.results import SyncStateData
from triomq.controller.core.wire import (
    ControllerMetadata,
    ReplicaInfo,
    WireError,
    decode_sync_state_data,
    elect_fields,
    encode_elect_body,
    encode_sync_state_data,
    encode_sync_state_set,
    join_ids,
    metadata_fields,
    read_elect_answer,
    read_metadata,
    read_replica_info,
    read_sync_state_set,
    replica_info_fields,
    rocketmq_address,
)
from triomq.errors import ConfigError
from triomq.protocol.header_fields import INT32, HeaderFields
from triomq.protocol.java_properties import PropertiesError, dump_properties, load_properties
from triomq.protocol.remoting import RemotingCommand

__all__ = [
    "AlterSyncStateSet",
    "ApplyBrokerId",
    "BrokerHeartbeat",
    "CleanBrokerData",
    "ConfigValues",
    "ControllerRequest",
    "ElectAnswer",
    "ElectMaster",
    "GetControllerConfig",
    "GetMetadata",
    "GetNextBrokerId",
    "GetReplicaInfo",
    "GetSyncStateData",
    "Malformed",
    "NextBrokerId",
    "RegisterBroker",
    "Reply",
    "SyncStateSet",
    "SyncStateTable",
    "UpdateControllerConfig",
    "decode_request",
    "read_reply",
    "reply_command",
    "request_frame",
]


def _ids(ids: Iterable[int]) -> frozenset[int]:
    return frozenset(ids)


@attrs.frozen
class GetNextBrokerId:
    """GET_NEXT_BROKER_ID."""

    cluster_name: str
    broker_name: str


@attrs.frozen
class ApplyBrokerId:
    """APPLY_BROKER_ID: claim ``broker_id``, proven later by ``check_code``
    (``<broker address>;<time>``, as RocketMQ's broker writes it)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    check_code: str

    @property
    def broker_address(self) -> str:
        """The address the check code starts with, as RocketMQ's controller reads it."""
        return self.check_code.partition(";")[0]


@attrs.frozen
class RegisterBroker:
    """REGISTER_BROKER."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str


@attrs.frozen
class BrokerHeartbeat:
    """BROKER_HEARTBEAT with the broker's live info."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0
    heartbeat_timeout_ms: int | None = None


@attrs.frozen
class AlterSyncStateSet:
    """ALTER_SYNC_STATE_SET from a group's master, fenced by both epochs."""

    broker_name: str
    master_broker_id: int
    master_epoch: int
    sync_state_set_epoch: int
    new_sync_state_set: frozenset[int] = attrs.field(converter=_ids)


@attrs.frozen
class ElectMaster:
    """ELECT_MASTER by a broker (its own id) or an administrator (``designate``)."""

    cluster_name: str
    broker_name: str
    broker_id: int | None = None
    designate: bool = False


@attrs.frozen
class GetReplicaInfo:
    """GET_REPLICA_INFO."""

    broker_name: str


@attrs.frozen
class GetSyncStateData:
    """GET_SYNC_STATE_DATA of the named groups (none named: every group)."""

    broker_names: tuple[str, ...] = ()


@attrs.frozen
class GetMetadata:
    """GET_METADATA_INFO."""


@attrs.frozen
class CleanBrokerData:
    """CLEAN_BROKER_DATA of some replicas of a group (``broker_ids`` None: the group;
    ``cluster_name`` None: whichever cluster the group is in)."""

    cluster_name: str | None
    broker_name: str
    broker_ids: frozenset[int] | None = None
    clean_living_broker: bool = False


@attrs.frozen
class GetControllerConfig:
    """GET_CONTROLLER_CONFIG."""


@attrs.frozen
class UpdateControllerConfig:
    """UPDATE_CONTROLLER_CONFIG: the ``[controller]`` keys to change and their values."""

    values: Mapping[str, Any]


@attrs.frozen
class Malformed:
    """A request refused as it is decoded: ``reason`` says where, ``code`` is the answer's
    (CONTROLLER_INVALID_REQUEST unless the body names what RocketMQ never lets change)."""

    name: str
    reason: str
    code: int = ResponseCode.CONTROLLER_INVALID_REQUEST


ControllerRequest = (GetNextBrokerId | ApplyBrokerId | RegisterBroker | BrokerHeartbeat
                     | AlterSyncStateSet | ElectMaster | GetReplicaInfo | GetSyncStateData
                     | GetMetadata | CleanBrokerData | GetControllerConfig
                     | UpdateControllerConfig | Malformed)


# -- reply payloads ---------------------------------------------------------------


@attrs.frozen
class NextBrokerId:
    """GET_NEXT_BROKER_ID's answer (in the header)."""

    next_broker_id: int


@attrs.frozen
class SyncStateSet:
    """ALTER_SYNC_STATE_SET's answer: the applied set and its epoch."""

    members: frozenset[int] = attrs.field(converter=_ids)
    epoch: int = 0


@attrs.frozen
class SyncStateTable:
    """GET_SYNC_STATE_DATA's answer (RocketMQ's BrokerReplicasInfo)."""

    groups: tuple[SyncStateData, ...] = attrs.field(converter=tuple)


@attrs.frozen
class ElectAnswer:
    """ELECT_MASTER's answer (SUCCESS or CONTROLLER_MASTER_STILL_EXIST): the group after
    the election and its cluster, as RocketMQ's BrokerMemberGroup names it."""

    cluster_name: str
    info: ReplicaInfo


@attrs.frozen
class ConfigValues:
    """GET_CONTROLLER_CONFIG's answer: property names and values (``config.to_properties``)."""

    properties: Mapping[str, str]


Payload = (NextBrokerId | SyncStateSet | ReplicaInfo | ElectAnswer | SyncStateTable
           | ControllerMetadata | ConfigValues)


@attrs.frozen
class Reply:
    """The answer to request ``request_id``.

    CONTROLLER_NOT_LEADER names the leader this controller knows of
    (``leader_id`` 0 and ``leader_address`` "" while there is none).
    """

    request_id: int
    code: int
    remark: str = ""
    payload: Payload | None = None
    leader_id: int = 0
    leader_address: str = ""

    @property
    def ok(self) -> bool:
        """Whether the request succeeded."""
        return self.code == ResponseCode.SUCCESS


# -- remoting frames --------------------------------------------------------------


def _get_next_broker_id(header: HeaderFields, body: bytes) -> GetNextBrokerId:
    return GetNextBrokerId(header.string("clusterName"), header.string("brokerName"))


def _apply_broker_id(header: HeaderFields, body: bytes) -> ApplyBrokerId:
    return ApplyBrokerId(header.string("clusterName"), header.string("brokerName"),
                         header.integer("appliedBrokerId"), header.string("registerCheckCode"))


def _register_broker(header: HeaderFields, body: bytes) -> RegisterBroker:
    return RegisterBroker(header.string("clusterName"), header.string("brokerName"),
                          header.integer("brokerId"), header.string("brokerAddress"))


#: What a RocketMQ broker sends while its log or confirm offset is not known yet.
_UNKNOWN_OR_MORE = (-1, 2**63 - 1)


def _heartbeat(header: HeaderFields, body: bytes) -> BrokerHeartbeat:
    return BrokerHeartbeat(
        header.string("clusterName"), header.string("brokerName"), header.integer("brokerId"),
        header.string("brokerAddr"),
        epoch=header.integer("epoch", _UNKNOWN_OR_MORE),
        max_offset=header.integer("maxOffset", _UNKNOWN_OR_MORE),
        confirm_offset=header.integer("confirmOffset", _UNKNOWN_OR_MORE),
        election_priority=header.integer("electionPriority", INT32),
        heartbeat_timeout_ms=header.optional_integer("heartbeatTimeoutMills"))


def _alter_sync_state_set(header: HeaderFields, body: bytes) -> AlterSyncStateSet:
    broker_name = header.string("brokerName")
    master_broker_id = header.integer("masterBrokerId")
    master_epoch = header.integer("masterEpoch")
    # The body: the proposed set, with the epoch of the set it replaces.
    members, epoch = read_sync_state_set(body, f"{header.where} body")
    return AlterSyncStateSet(broker_name, master_broker_id, master_epoch, epoch, members)


def _elect_master(header: HeaderFields, body: bytes) -> ElectMaster:
    broker_name = header.string("brokerName")  # the key a refusal names first
    broker_id = header.optional_integer("brokerId", _UNKNOWN_OR_MORE)  # -1: RocketMQ's none
    return ElectMaster(header.string("clusterName"), broker_name,
                       None if broker_id == -1 else broker_id,
                       header.boolean("designateElect"))


def _get_replica_info(header: HeaderFields, body: bytes) -> GetReplicaInfo:
    return GetReplicaInfo(header.string("brokerName"))


def _get_sync_state_data(header: HeaderFields, body: bytes) -> GetSyncStateData:
    # mqadmin sends the names as a JSON list in the body.
    try:
        names = json.loads(body.decode()) if body else []
    except (ValueError, RecursionError):
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise WireError(f"{header.where}: the body must be a JSON list of broker names, "
                        f"got {bytes(body[:40])!r}")
    return GetSyncStateData(tuple(sorted(set(names))))


def _clean_broker_data(header: HeaderFields, body: bytes) -> CleanBrokerData:
    return CleanBrokerData(header.fields.get("clusterName") or None,
                           header.string("brokerName"),
                           header.id_set("brokerControllerIdsToClean"),
                           header.boolean("isCleanLivingBroker"))


def _update_controller_config(header: HeaderFields, body: bytes) -> ControllerRequest:
    try:
        properties = load_properties(body)
        if BLACK_LIST & set(properties):
            # RocketMQ's answer, word for word.
            return Malformed(header.where, "Can not update config in black list.",
                             ResponseCode.NO_PERMISSION)
        return UpdateControllerConfig(from_properties(properties))
    except (PropertiesError, ConfigError) as exc:
        raise WireError(f"{header.where}: {exc}") from None


_DECODERS: dict[int, Callable[[HeaderFields, bytes], ControllerRequest]] = {
    RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: _get_next_broker_id,
    RequestCode.CONTROLLER_APPLY_BROKER_ID: _apply_broker_id,
    RequestCode.CONTROLLER_REGISTER_BROKER: _register_broker,
    RequestCode.BROKER_HEARTBEAT: _heartbeat,
    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: _alter_sync_state_set,
    RequestCode.CONTROLLER_ELECT_MASTER: _elect_master,
    RequestCode.CONTROLLER_GET_REPLICA_INFO: _get_replica_info,
    RequestCode.CONTROLLER_GET_METADATA_INFO: lambda header, body: GetMetadata(),
    RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: _get_sync_state_data,
    RequestCode.CLEAN_BROKER_DATA: _clean_broker_data,
    RequestCode.GET_CONTROLLER_CONFIG: lambda header, body: GetControllerConfig(),
    RequestCode.UPDATE_CONTROLLER_CONFIG: _update_controller_config,
}

#: The request codes a controller serves.
REQUEST_CODES = tuple(_DECODERS)


def decode_request(command: RemotingCommand) -> ControllerRequest:
    """The request ``command`` carries; ``Malformed`` when it does not decode.

    ``command.code`` must be one of ``REQUEST_CODES``.
    """
    name = RequestCode(command.code).name
    try:
        return _DECODERS[command.code](HeaderFields(command.ext_fields, name, error=WireError),
                                       command.body)
    except WireError as exc:
        return Malformed(name, str(exc))


def _payload_frame(payload: Payload | None) -> tuple[dict[str, str] | None, bytes]:
    if isinstance(payload, ReplicaInfo):
        return replica_info_fields(payload), encode_sync_state_set(
            payload.sync_state_set, payload.sync_state_set_epoch)
    if isinstance(payload, ElectAnswer):
        return elect_fields(payload.info), encode_elect_body(payload.cluster_name, payload.info)
    if isinstance(payload, NextBrokerId):
        return {"nextBrokerId": str(payload.next_broker_id)}, b""
    if isinstance(payload, SyncStateSet):
        return ({"newSyncStateSetEpoch": str(payload.epoch)},
                encode_sync_state_set(payload.members, payload.epoch))
    if isinstance(payload, SyncStateTable):
        return None, encode_sync_state_data(payload.groups)
    if isinstance(payload, ConfigValues):
        return None, dump_properties(payload.properties)
    if isinstance(payload, ControllerMetadata):
        return metadata_fields(payload), b""
    return None, b""


def reply_command(reply: Reply) -> RemotingCommand:
    """``reply`` as a remoting response (the RPC layer stamps the request's opaque)."""
    if reply.code == ResponseCode.CONTROLLER_NOT_LEADER:
        fields: dict[str, str] | None = {"leaderId": str(reply.leader_id or ""),
                                         "leaderAddress": reply.leader_address}
        body = b""
    else:
        fields, body = _payload_frame(reply.payload)
    return RemotingCommand.response(reply.code, remark=reply.remark or None,
                                    ext_fields=fields, body=body)


# -- the client's side: the frame of a request, the payload of its answer -----------


def _flag(value: bool) -> str:
    return "true" if value else "false"


def request_frame(request: ControllerRequest) -> tuple[RequestCode, dict[str, str], bytes]:
    """The request code, header fields and body ``request`` travels as (what
    ``decode_request`` reads); ``ValueError`` for ``Malformed``, which only a
    controller makes."""
    if isinstance(request, GetNextBrokerId):
        return RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {
            "clusterName": request.cluster_name, "brokerName": request.broker_name}, b""
    if isinstance(request, ApplyBrokerId):
        return RequestCode.CONTROLLER_APPLY_BROKER_ID, {
            "clusterName": request.cluster_name, "brokerName": request.broker_name,
            "appliedBrokerId": str(request.broker_id),
            "registerCheckCode": request.check_code}, b""
    if isinstance(request, RegisterBroker):
        return RequestCode.CONTROLLER_REGISTER_BROKER, {
            "clusterName": request.cluster_name, "brokerName": request.broker_name,
            "brokerId": str(request.broker_id),
            "brokerAddress": rocketmq_address(request.broker_address)}, b""
    if isinstance(request, BrokerHeartbeat):
        fields = {
            "clusterName": request.cluster_name, "brokerName": request.broker_name,
            "brokerId": str(request.broker_id),
            "brokerAddr": rocketmq_address(request.broker_address),
            "epoch": str(request.epoch), "maxOffset": str(request.max_offset),
            "confirmOffset": str(max(request.confirm_offset, 0)),
            "electionPriority": str(request.election_priority)}
        if request.heartbeat_timeout_ms is not None:
            fields["heartbeatTimeoutMills"] = str(request.heartbeat_timeout_ms)
        return RequestCode.BROKER_HEARTBEAT, fields, b""
    if isinstance(request, AlterSyncStateSet):
        return RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
            "brokerName": request.broker_name,
            "masterBrokerId": str(request.master_broker_id),
            "masterEpoch": str(request.master_epoch)}, encode_sync_state_set(
                request.new_sync_state_set, request.sync_state_set_epoch)
    if isinstance(request, ElectMaster):
        fields = {"clusterName": request.cluster_name, "brokerName": request.broker_name,
                  "designateElect": _flag(request.designate)}
        if request.broker_id is not None:
            fields["brokerId"] = str(request.broker_id)
        return RequestCode.CONTROLLER_ELECT_MASTER, fields, b""
    if isinstance(request, GetReplicaInfo):
        return RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": request.broker_name}, b""
    if isinstance(request, GetSyncStateData):
        # mqadmin's way: the names as a JSON list in the body.
        return RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, json.dumps(
            sorted(set(request.broker_names))).encode()
    if isinstance(request, GetMetadata):
        return RequestCode.CONTROLLER_GET_METADATA_INFO, {}, b""
    if isinstance(request, CleanBrokerData):
        fields = {"brokerName": request.broker_name,
                  "isCleanLivingBroker": _flag(request.clean_living_broker)}
        if request.cluster_name is not None:
            fields["clusterName"] = request.cluster_name
        if request.broker_ids is not None:
            fields["brokerControllerIdsToClean"] = join_ids(request.broker_ids)
        return RequestCode.CLEAN_BROKER_DATA, fields, b""
    if isinstance(request, GetControllerConfig):
        return RequestCode.GET_CONTROLLER_CONFIG, {}, b""
    if isinstance(request, UpdateControllerConfig):
        return RequestCode.UPDATE_CONTROLLER_CONFIG, {}, dump_properties(
            to_properties(request.values))
    raise ValueError(f"{request!r} is not a request a client sends")


def read_reply(request: ControllerRequest, response: RemotingCommand) -> Payload | None:
    """The payload of ``response``, the answer to ``request``, as the core's ``Reply``
    carried it (None for a refusal and for requests answered without one);
    ``WireError`` names what does not decode."""
    code = response.code
    if isinstance(request, ElectMaster):
        # The group's master is the answer either way.
        if code not in (ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
            return None
        return ElectAnswer(request.cluster_name, read_elect_answer(
            response.ext_fields, response.body, request.broker_name))
    if code != ResponseCode.SUCCESS:
        return None
    if isinstance(request, GetNextBrokerId):
        return NextBrokerId(HeaderFields(response.ext_fields, "GET_NEXT_BROKER_ID response",
                                         error=WireError).integer("nextBrokerId"))
    if isinstance(request, RegisterBroker):
        return read_replica_info(response.ext_fields, response.body, request.broker_name,
                                 "REGISTER_BROKER response")
    if isinstance(request, GetReplicaInfo):
        return read_replica_info(response.ext_fields, response.body, request.broker_name,
                                 "GET_REPLICA_INFO response")
    if isinstance(request, AlterSyncStateSet):
        return SyncStateSet(*read_sync_state_set(response.body, "ALTER_SYNC_STATE_SET response"))
    if isinstance(request, GetSyncStateData):
        return SyncStateTable(decode_sync_state_data(response.body))
    if isinstance(request, GetMetadata):
        return read_metadata(response.ext_fields)
    if isinstance(request, GetControllerConfig):
        try:
            return ConfigValues(load_properties(response.body))
        except PropertiesError as exc:
            raise WireError(f"GET_CONTROLLER_CONFIG response: {exc}") from None
    return None
