"""Which replica a broker is, as the controllers registered it (``<store root>/brokerIdentity``).

The file's JSON (``clusterName``, ``brokerName``, ``brokerId``,
``registerCheckCode``) is encoded and decoded here; reading and writing it
is the controller-mode driver's (``triomq.broker.replication.controller_mode``).
"""

from __future__ import annotations

import json

import attrs

from triomq.errors import ConfigError

__all__ = ["IDENTITY_FILE", "BrokerIdentity"]

#: The identity file under the store root (RocketMQ's storePathBrokerIdentity).
IDENTITY_FILE = "brokerIdentity"


@attrs.frozen
class BrokerIdentity:
    """Which replica this is, as the controllers registered it."""

    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str

    def encode(self) -> bytes:
        """The identity file's content."""
        return json.dumps({"clusterName": self.cluster_name, "brokerName": self.broker_name,
                           "brokerId": self.broker_id,
                           "registerCheckCode": self.register_check_code}).encode()

    @classmethod
    def decode(cls, data: bytes, where: str) -> BrokerIdentity:
        """The identity in ``data`` (the file at ``where``); ``ConfigError`` if damaged."""
        try:
            fields = json.loads(data)
            names = (fields["clusterName"], fields["brokerName"], fields["registerCheckCode"])
            if not all(isinstance(name, str) for name in names):
                raise TypeError("names must be strings")
            return cls(names[0], names[1], int(fields["brokerId"]), names[2])
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise ConfigError(f"broker identity file {where!r} is damaged: {exc}") from None
