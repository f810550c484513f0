"""What a controller takes as input: names, broker ids and addresses, checked in one place.

``check_request`` looks at a decoded request (``triomq.controller.core.requests``)
before the controller serves it: the controller service asks it for every
request code it serves, as it decodes the request, so a refused request
reaches neither the service's core nor Raft. (The cluster simulation feeds
the core directly with its own values: its brokers' addresses are their
names.) The rules:

- cluster and broker-group names follow RocketMQ's topic-name rules
  (``triomq.protocol.topic_rules``): 1 to 127 characters of
  ``%|a-zA-Z0-9_-``;
- broker ids are those a controller hands out: ``FIRST_BROKER_ID`` (1) up
  to ``MAX_BROKER_ID`` (Java's ``long``), in every id field and id set;
- broker addresses are ``host:port`` as RocketMQ writes them, or a
  transport's ``scheme://location`` (``tcp://host:port``,
  ``inproc://name``), with a port from 1 to 65535 wherever there is one,
  no blanks or control characters, at most ``MAX_ADDRESS_LENGTH``;
- a register check code is at most ``MAX_CHECK_CODE_LENGTH`` printable
  characters.

A broken rule is ``Invalid``: CONTROLLER_BROKER_ID_INVALID for an id,
CONTROLLER_INVALID_REQUEST otherwise, with a remark naming the request,
the header field (its wire name; or the body, GET_SYNC_STATE_DATA's list of
names) and the value (cut short when long).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from triomq.controller.core import _json
from triomq.controller.core.codes import RequestCode, ResponseCode
from triomq.controller.core.group import FIRST_BROKER_ID
from triomq.controller.core.requests import (
    AlterSyncStateSet,
    ApplyBrokerId,
    BrokerHeartbeat,
    CleanBrokerData,
    ControllerRequest,
    ElectMaster,
    GetNextBrokerId,
    GetReplicaInfo,
    GetSyncStateData,
    RegisterBroker,
)
from triomq.protocol.topic_rules import TOPIC_MAX_LENGTH, has_legal_characters

__all__ = ["MAX_ADDRESS_LENGTH", "MAX_BROKER_ID", "MAX_CHECK_CODE_LENGTH", "Invalid",
           "check_address", "check_request"]

#: The largest broker id (RocketMQ's ids are Java ``long``s).
MAX_BROKER_ID = _json.MAX_INT
MAX_ADDRESS_LENGTH = 255
MAX_CHECK_CODE_LENGTH = 255
#: How much of a bad value a remark quotes.
_QUOTED = 64

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*", re.ASCII)
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.%a-zA-Z]+\]", re.ASCII)


@attrs.frozen
class Invalid:
    """Why a request is refused before it is served: its response code and remark."""

    code: ResponseCode
    remark: str


def _quote(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _QUOTED else text[:_QUOTED] + "..."


def _name(value: str) -> str | None:
    if not has_legal_characters(value):
        return "not a legal name: only the characters %|a-zA-Z0-9_- are allowed"
    if len(value) > TOPIC_MAX_LENGTH:
        return f"longer than {TOPIC_MAX_LENGTH} characters ({len(value)})"
    return None


def _port(text: str) -> str | None:
    if not text.isascii() or not text.isdigit() or len(text) > 5 or not 0 < int(text) < 65536:
        return "expected a port from 1 to 65535 after the last ':'"
    return None


def _host_port(location: str) -> str | None:
    host, sep, port = location.rpartition(":")
    if not sep:
        return "expected host:port"
    if not _HOST.fullmatch(host):
        return f"expected host:port, the host {_quote(host)} is not a host name or address"
    return _port(port)


def check_address(address: str) -> str | None:
    """Why ``address`` cannot be a broker's address (``None``: it can)."""
    if len(address) > MAX_ADDRESS_LENGTH:
        return f"longer than {MAX_ADDRESS_LENGTH} characters ({len(address)})"
    if not address.isprintable() or any(c.isspace() for c in address):
        return "contains blanks or control characters"
    scheme, sep, location = address.partition("://")
    if not sep:
        return _host_port(address)
    if not _SCHEME.fullmatch(scheme) or not location:
        return "expected host:port or scheme://location"
    # A TCP address is dialled as host:port; other transports name their endpoints
    # as they like, but a trailing port must still be one.
    if scheme == "tcp":
        return _host_port(location)
    _, sep, tail = location.rpartition(":")
    return _port(tail) if sep and tail.isdigit() else None


def _check_code(value: str) -> str | None:
    if len(value) > MAX_CHECK_CODE_LENGTH:
        return f"longer than {MAX_CHECK_CODE_LENGTH} characters ({len(value)})"
    if not value.isprintable():
        return "contains control characters"
    return None


def _broker_id(value: int) -> str | None:
    if not FIRST_BROKER_ID <= value <= MAX_BROKER_ID:
        return f"a broker id is from {FIRST_BROKER_ID} to {MAX_BROKER_ID}"
    return None


# A field's rule: (where it is on the wire, value of the request, check, code when broken).
_Rule = tuple[str, Callable[[ControllerRequest], object], Callable[[object], str | None],
              ResponseCode]

_INVALID = ResponseCode.CONTROLLER_INVALID_REQUEST
_BAD_ID = ResponseCode.CONTROLLER_BROKER_ID_INVALID


def _rule(key: str, attribute: str, check: Callable[..., str | None],
          code: ResponseCode = _INVALID, *, where: str = "") -> _Rule:
    return (where or f"header field {key!r}", lambda request: getattr(request, attribute),
            check, code)


def _each(check: Callable[..., str | None]) -> Callable[..., str | None]:
    """``check`` applied to every member of a collection (``None``: none given)."""
    def check_all(values: Iterable[Any] | None) -> str | None:
        for value in sorted(values or ()):  # the same member named first each time
            reason = check(value)
            if reason is not None:
                return f"{_quote(value)}: {reason}"
        return None

    return check_all


def _optional(check: Callable[..., str | None]) -> Callable[..., str | None]:
    """``check`` for a field that may be left out (``None``)."""
    return lambda value: None if value is None else check(value)


_CLUSTER = _rule("clusterName", "cluster_name", _name)
_GROUP = _rule("brokerName", "broker_name", _name)

_RULES: dict[type, tuple[RequestCode, tuple[_Rule, ...]]] = {
    GetNextBrokerId: (RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, (_CLUSTER, _GROUP)),
    ApplyBrokerId: (RequestCode.CONTROLLER_APPLY_BROKER_ID, (
        _CLUSTER, _GROUP, _rule("appliedBrokerId", "broker_id", _broker_id, _BAD_ID),
        _rule("registerCheckCode", "check_code", _check_code),
        _rule("", "broker_address", check_address,
              where="header field 'registerCheckCode', its address"))),
    RegisterBroker: (RequestCode.CONTROLLER_REGISTER_BROKER, (
        _CLUSTER, _GROUP, _rule("brokerId", "broker_id", _broker_id, _BAD_ID),
        _rule("brokerAddress", "broker_address", check_address))),
    BrokerHeartbeat: (RequestCode.BROKER_HEARTBEAT, (
        _CLUSTER, _GROUP, _rule("brokerId", "broker_id", _broker_id, _BAD_ID),
        _rule("brokerAddr", "broker_address", check_address))),
    AlterSyncStateSet: (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, (
        _GROUP, _rule("masterBrokerId", "master_broker_id", _broker_id, _BAD_ID),
        _rule("", "new_sync_state_set", _each(_broker_id), _BAD_ID,
              where="body 'syncStateSet'"))),
    ElectMaster: (RequestCode.CONTROLLER_ELECT_MASTER, (
        _CLUSTER, _GROUP,
        _rule("brokerId", "broker_id", _optional(_broker_id), _BAD_ID))),
    GetReplicaInfo: (RequestCode.CONTROLLER_GET_REPLICA_INFO, (_GROUP,)),
    GetSyncStateData: (RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, (
        _rule("", "broker_names", _each(_name), where="body"),)),
    CleanBrokerData: (RequestCode.CLEAN_BROKER_DATA, (
        _rule("clusterName", "cluster_name", _optional(_name)), _GROUP,
        _rule("brokerControllerIdsToClean", "broker_ids", _each(_broker_id), _BAD_ID))),
}


def check_request(request: ControllerRequest) -> Invalid | None:
    """Why ``request`` is refused before it is served, or ``None`` when its input is fine.

    Requests without names, ids or addresses (metadata, configuration, a
    ``Malformed`` one, answered as such) pass.
    """
    rules = _RULES.get(type(request))
    if rules is None:
        return None
    code, fields = rules
    for where, value_of, check, refusal in fields:
        value = value_of(request)
        reason = check(value)
        if reason is not None:
            shown = "" if isinstance(value, frozenset | tuple) else f" {_quote(value)}"
            return Invalid(refusal, f"{code.name}: {where}{shown}: {reason}")
    return None
