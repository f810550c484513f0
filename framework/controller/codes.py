"""Controller request and response codes, with RocketMQ's numbers and names.

The numbers are the ones RocketMQ 5 puts in remoting frames (``RequestCode``
and ``ResponseCode``), so a frame captured from a RocketMQ controller reads
the same here.
"""

from __future__ import annotations

import enum


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


class ResponseCode(enum.IntEnum):
    """Outcomes of controller requests (remoting frame ``code`` of a response)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    #: An admin request without an admin's credential (``triomq.admin_access``).
    NO_PERMISSION = 16
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014
    CONTROLLER_JRAFT_INTERNAL_ERROR = 2015
    CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016
