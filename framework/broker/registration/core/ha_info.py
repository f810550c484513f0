"""EXCHANGE_BROKER_HA_INFO (906): where a group's master is, told or asked (pure).

A static master coming back through pre-online is not registered yet, so its
slaves cannot learn from the name servers that it is there; their HA clients
may be waiting out a backoff of seconds. So it tells each slave its HA
address (``masterHaAddress``), its broker address (``masterAddress``) and the
log's end when it started (``masterFlushOffset``), as RocketMQ's
``BrokerPreOnlineService`` does. The same request without
``masterHaAddress`` asks a broker for that information: a master answers
it, any other static broker answers with nothing. A controller-mode slave
asks the master the controllers named so before it follows it, and may
ask before that broker took the role: in controller mode every broker
answers with its own.

A static slave follows the master its configuration names
(``ha_master_address``), so what the announcement changes is when: a slave
told by that master reconnects at once. An announcement of any other HA
address would let any peer move a slave to a log of its choosing: it is
refused (NO_PERMISSION) and changes nothing; so is one to a master, and one
in controller mode, where the controllers name the master.
``masterFlushOffset`` is read and not used: triomq's slave truncates by the
epochs of its HA handshake instead.

Addresses compare with their scheme (``tcp://host:port``): the driver
passes them so.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from triomq.protocol.header_fields import HeaderFields
from triomq.protocol.response_codes import ResponseCode

__all__ = ["Answer", "Follow", "HaInfo", "Refuse", "exchange"]

REQUEST = "EXCHANGE_BROKER_HA_INFO"


@attrs.frozen
class HaInfo:
    """The request's (and the answer's) header, as RocketMQ's ExchangeHAInfo headers."""

    master_ha_address: str | None = None
    master_flush_offset: int | None = None
    master_address: str | None = None

    @classmethod
    def parse(cls, fields: Mapping[str, str]) -> HaInfo:
        """``HeaderFieldError`` naming the field if ``masterFlushOffset`` is no integer."""
        header = HeaderFields(fields, REQUEST)
        return cls(fields.get("masterHaAddress") or None,
                   header.optional_integer("masterFlushOffset"),
                   fields.get("masterAddress") or None)

    def fields(self) -> dict[str, str]:
        values = {"masterHaAddress": self.master_ha_address,
                  "masterFlushOffset": (None if self.master_flush_offset is None
                                        else str(self.master_flush_offset)),
                  "masterAddress": self.master_address}
        return {key: value for key, value in values.items() if value is not None}


@attrs.frozen
class Follow:
    """Reconnect to the master at ``ha_address`` now."""

    ha_address: str


@attrs.frozen
class Answer:
    info: HaInfo


@attrs.frozen
class Refuse:
    code: int
    remark: str


def exchange(request: HaInfo, *, broker_name: str, master: bool, static: bool,
             master_ha_address: str, own: HaInfo) -> Follow | Answer | Refuse:
    """What a broker does with an EXCHANGE_BROKER_HA_INFO.

    ``master``: whether it is its group's master now; ``master_ha_address``: the HA
    address a static slave follows; ``own``: what it answers a query with as master."""
    if request.master_ha_address is None:
        return Answer(own if master or not static else HaInfo())
    if not static:
        return Refuse(ResponseCode.NO_PERMISSION,
                      f"{REQUEST}: in controller mode the controllers name "
                      f"{broker_name}'s master")
    if master:
        return Refuse(ResponseCode.NO_PERMISSION,
                      f"{REQUEST}: this broker is {broker_name}'s master and follows no one")
    if request.master_ha_address != master_ha_address:
        return Refuse(ResponseCode.NO_PERMISSION,
                      f"{REQUEST}: HA address {request.master_ha_address} is not "
                      f"{broker_name}'s master's (it follows {master_ha_address})")
    return Follow(request.master_ha_address)
