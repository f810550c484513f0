"""Controller request and response codes, with RocketMQ's numbers and names.

The numbers are the ones RocketMQ 5 puts in remoting frames (``RequestCode``
and ``ResponseCode``), so a frame captured from a RocketMQ controller reads
the same here; ``ResponseCode`` is the one table every role shares
(``triomq.protocol.response_codes``), the controller's own answers being
its CONTROLLER_* codes.
"""

from __future__ import annotations

import enum

from triomq.protocol.response_codes import ResponseCode

__all__ = ["RequestCode", "ResponseCode"]


class RequestCode(enum.IntEnum):
    """Requests a controller serves (remoting frame ``code``)."""

    ALTER_SYNC_STATE_SET = 1001
    ELECT_MASTER = 1002
    REGISTER_BROKER = 1003
    GET_REPLICA_INFO = 1004
    GET_METADATA_INFO = 1005
    GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008
    UPDATE_CONTROLLER_CONFIG = 1009
    GET_CONTROLLER_CONFIG = 1010
    CLEAN_BROKER_DATA = 1011
    GET_NEXT_BROKER_ID = 1012
    APPLY_BROKER_ID = 1013
    #: Shared with the nameserver: a broker's lightweight heartbeat with live info.
    BROKER_HEARTBEAT = 904
