"""The controller's state-machine events and their log-entry encoding.

A request validated by the active controller yields events; the events are
appended to the Raft log and, once committed, applied on every controller
(``ReplicasInfoManager.apply``). Each event carries the epochs it was
computed for, so applying it twice, or after a competing event, changes
nothing (see ``ReplicasInfoManager.apply``).

Encoding: one canonical JSON object per event with a ``"type"`` tag, e.g.
``{"broker_name":"b","master_epoch":3,"new_master_broker_id":2,
"sync_state_set_epoch":5,"type":"ElectMaster"}``. Sets of broker ids are
strictly increasing lists. ``decode_event`` accepts only what
``encode_event`` writes and raises ``EventDecodeError`` otherwise.
"""

from __future__ import annotations

from typing import Any

import attrs

from triomq.controller.core import _json
from triomq.errors import TriomqError


class EventDecodeError(TriomqError, ValueError):
    """A log entry is not a controller event this version understands."""


@attrs.frozen
class ApplyBrokerIdEvent:
    """A replica took ``broker_id`` in its group; creates the group on its first replica."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str
    register_check_code: str


@attrs.frozen
class UpdateBrokerAddressEvent:
    """A registered replica came back at a new address (the RegisterBroker path)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_address: str


@attrs.frozen
class AlterSyncStateSetEvent:
    """The master of ``master_epoch`` changed the SyncStateSet.

    ``sync_state_set_epoch`` is the new epoch: the group's current one plus one.
    """

    broker_name: str
    master_epoch: int
    sync_state_set: frozenset[int] = attrs.field(converter=frozenset)
    sync_state_set_epoch: int


@attrs.frozen
class ElectMasterEvent:
    """A master election finished: a new master, or (``None``) none could be elected.

    ``master_epoch`` and ``sync_state_set_epoch`` are the group's new epochs.
    A new master moves both by one and makes the SyncStateSet ``{it}``;
    "no master elected" moves ``master_epoch`` by one (fencing the dead
    master) and keeps the SyncStateSet and its epoch.
    """

    broker_name: str
    new_master_broker_id: int | None
    master_epoch: int
    sync_state_set_epoch: int

    @property
    def new_master_elected(self) -> bool:
        """Whether this election produced a master."""
        return self.new_master_broker_id is not None


@attrs.frozen
class CleanBrokerDataEvent:
    """Forget some replicas of a group (``broker_ids``) or the whole group (``None``)."""

    broker_name: str
    broker_ids: frozenset[int] | None = attrs.field(
        default=None, converter=attrs.converters.optional(frozenset)
    )


Event = (
    ApplyBrokerIdEvent
    | UpdateBrokerAddressEvent
    | AlterSyncStateSetEvent
    | ElectMasterEvent
    | CleanBrokerDataEvent
)

# Field kinds, per event type tag: how each field is written and read.
_STR, _INT, _OPT_INT, _IDS, _OPT_IDS = "str", "int", "opt_int", "ids", "opt_ids"

_SPECS: dict[str, tuple[type, dict[str, str]]] = {
    "ApplyBrokerId": (ApplyBrokerIdEvent, {
        "cluster_name": _STR, "broker_name": _STR, "broker_id": _INT,
        "broker_address": _STR, "register_check_code": _STR,
    }),
    "UpdateBrokerAddress": (UpdateBrokerAddressEvent, {
        "cluster_name": _STR, "broker_name": _STR, "broker_id": _INT, "broker_address": _STR,
    }),
    "AlterSyncStateSet": (AlterSyncStateSetEvent, {
        "broker_name": _STR, "master_epoch": _INT, "sync_state_set": _IDS,
        "sync_state_set_epoch": _INT,
    }),
    "ElectMaster": (ElectMasterEvent, {
        "broker_name": _STR, "new_master_broker_id": _OPT_INT, "master_epoch": _INT,
        "sync_state_set_epoch": _INT,
    }),
    "CleanBrokerData": (CleanBrokerDataEvent, {"broker_name": _STR, "broker_ids": _OPT_IDS}),
}
_TAGS: dict[type, str] = {cls: tag for tag, (cls, _) in _SPECS.items()}


def _encode_value(value: Any) -> Any:
    if isinstance(value, frozenset):
        return sorted(value)
    return value


def encode_event(event: Event) -> bytes:
    """Encode ``event`` as a log entry payload (canonical JSON)."""
    tag = _TAGS.get(type(event))
    if tag is None:
        raise TypeError(f"not a controller event: {type(event).__name__}")
    _, fields = _SPECS[tag]
    obj = {name: _encode_value(getattr(event, name)) for name in fields}
    obj["type"] = tag
    return _json.dump(obj)


def decode_event(data: bytes) -> Event:
    """Decode a log entry payload written by ``encode_event``.

    Raises ``EventDecodeError`` naming the event type and field at fault.
    """
    obj = _json.load_object(data, "controller event", EventDecodeError)
    tag = obj.get("type")
    if not isinstance(tag, str) or tag not in _SPECS:
        raise EventDecodeError(f"controller event: unknown type {tag!r}")
    cls, fields = _SPECS[tag]
    reader = _json.FieldReader(obj, f"{tag} event", EventDecodeError)
    reader.expect_keys({"type", *fields})
    readers = {
        _STR: reader.string,
        _INT: reader.integer,
        _OPT_INT: reader.optional_integer,
        _IDS: reader.id_set,
        _OPT_IDS: reader.optional_id_set,
    }
    return cls(**{name: readers[kind](name) for name, kind in fields.items()})
