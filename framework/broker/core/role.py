"""What a broker replica is now: master, slave, or neither."""

from __future__ import annotations

import enum

__all__ = ["BrokerRole"]


class BrokerRole(enum.Enum):
    """What a replica is now; ``NONE`` before its first role and during a change."""

    NONE = "none"
    MASTER = "master"
    SLAVE = "slave"
