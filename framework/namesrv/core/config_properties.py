"""GET_NAMESRV_CONFIG and UPDATE_NAMESRV_CONFIG: ``[namesrv]`` under RocketMQ's names. Pure.

RocketMQ answers GET_NAMESRV_CONFIG (319) with its ``NamesrvConfig`` and
Netty settings as properties text (``name=value`` lines, sorted), which
``mqadmin getNamesrvConfig`` prints, and applies an UPDATE_NAMESRV_CONFIG
(318) properties body to them, refusing with NO_PERMISSION ("Can not
update config in black list.") a body naming one of its black-listed keys
(the paths and the black list itself).

Here ``namesrv_properties`` gives each ``[namesrv]`` key that has a
counterpart in ``NamesrvConfig`` under that name (``ROCKETMQ_NAMES``), plus
``NamesrvFacts`` of the running node: the listen port and ``kvConfigPath`` (only
when the KV config is kept on disk). ``broker_not_active_timeout`` has no
counterpart (RocketMQ's is a constant) and is left out, as are RocketMQ's
thread-pool settings, which triomq has no equivalent of.

``updated`` applies a body: every named key can change at run time (the
name server reads its settings per request and per scan); a black-listed
key raises ``UpdateRefused`` with ``black_listed`` set, and, where RocketMQ
would silently keep a name it does not use, a read-only fact or an unknown
name raises ``UpdateRefused`` naming it. A value of the wrong form (a
boolean other than ``true``/``false``, a non-positive interval) is refused
the same way. Nothing is changed by a refused body. Updates last until the
name server stops: RocketMQ writes them to ``namesrv.properties`` only when
started with one, and triomq's configuration file stays the operator's.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from triomq.errors import ConfigError, TriomqError
from triomq.namesrv.config import NamesrvConfig
from triomq.settings import from_mapping

__all__ = ["BLACK_LIST", "ROCKETMQ_NAMES", "TRIOMQ_ONLY", "NamesrvFacts", "UpdateRefused",
           "namesrv_properties", "updated"]

#: ``[namesrv]`` keys and RocketMQ's ``NamesrvConfig`` names for them.
ROCKETMQ_NAMES: Mapping[str, str] = {
    "scan_not_active_broker_interval": "scanNotActiveBrokerInterval",
    "support_acting_master": "supportActingMaster",
    "delete_topic_with_broker_registration": "deleteTopicWithBrokerRegistration",
    "enable_all_topic_list": "enableAllTopicList",
    "enable_topic_list": "enableTopicList",
    "order_message_enable": "orderMessageEnable",
    "return_order_topic_config_to_broker": "returnOrderTopicConfigToBroker",
}

#: ``[namesrv]`` keys RocketMQ has no setting for.
TRIOMQ_ONLY = frozenset({"broker_not_active_timeout"})

#: Names RocketMQ never lets UPDATE_NAMESRV_CONFIG change (its ``configBlackList`` default
#: and the names it always adds).
BLACK_LIST = frozenset({"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome"})

_KEYS = {name: key for key, name in ROCKETMQ_NAMES.items()}


class UpdateRefused(TriomqError):
    """An UPDATE_NAMESRV_CONFIG body that changes nothing; ``remark`` says why."""

    def __init__(self, remark: str, *, black_listed: bool = False) -> None:
        self.remark = remark
        self.black_listed = black_listed
        super().__init__(remark)


@attrs.frozen
class NamesrvFacts:
    """What the running name server decides rather than its file."""

    listen_port: int | None = None
    #: Where the KV config is saved; None when it is kept in memory only.
    kv_config_path: str | None = None

    def properties(self) -> dict[str, str]:
        out = {}
        if self.listen_port is not None:
            out["listenPort"] = str(self.listen_port)
        if self.kv_config_path is not None:
            out["kvConfigPath"] = self.kv_config_path
        return out


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def namesrv_properties(config: NamesrvConfig, facts: NamesrvFacts) -> dict[str, str]:
    """GET_NAMESRV_CONFIG's properties: RocketMQ name -> value text."""
    values = attrs.asdict(config)
    return {**{name: _text(values[key]) for key, name in ROCKETMQ_NAMES.items()},
            **facts.properties()}


def _typed(name: str, text: str, current: object) -> object:
    if isinstance(current, bool):
        # Stricter than Java's Boolean.parseBoolean, which reads any typo as false.
        if text.strip() not in ("true", "false"):
            raise UpdateRefused(f"{name}: expected true or false, got {text!r}")
        return text.strip() == "true"
    digits = text.strip()
    if not digits.isascii() or not digits.lstrip("-").isdigit():
        raise UpdateRefused(f"{name}: expected an integer, got {text!r}")
    return int(digits)


def updated(config: NamesrvConfig, properties: Mapping[str, str],
            facts: NamesrvFacts) -> NamesrvConfig:
    """``config`` with the properties applied; ``UpdateRefused`` if any cannot be."""
    if BLACK_LIST & set(properties):
        raise UpdateRefused("Can not update config in black list.", black_listed=True)
    read_only = sorted(set(properties) & set(facts.properties()))
    if read_only:
        raise UpdateRefused(f"read-only while the name server runs: {', '.join(read_only)}")
    unknown = sorted(set(properties) - set(_KEYS))
    if unknown:
        raise UpdateRefused(f"unknown name server config: {', '.join(unknown)}; known: "
                            f"{', '.join(sorted(_KEYS))}")
    values = attrs.asdict(config)
    for name, text in properties.items():
        values[_KEYS[name]] = _typed(name, text, values[_KEYS[name]])
    try:
        return from_mapping(NamesrvConfig, values)
    except ConfigError as exc:
        raise UpdateRefused(_rocketmq_named(str(exc))) from None


def _rocketmq_named(message: str) -> str:
    """A settings error about ``[namesrv]`` keys, told with RocketMQ's names."""
    for key, name in ROCKETMQ_NAMES.items():
        message = message.replace(key, name)
    return message
