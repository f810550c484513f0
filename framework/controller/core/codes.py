"""The controller's request and response codes: RocketMQ's two tables.

A controller serves the ``CONTROLLER_*`` requests, GET_BROKER_EPOCH_CACHE,
NOTIFY_BROKER_ROLE_CHANGED, UPDATE/GET_CONTROLLER_CONFIG, CLEAN_BROKER_DATA and
BROKER_HEARTBEAT of ``triomq.protocol.request_codes``, and answers with its
``CONTROLLER_*`` codes of ``triomq.protocol.response_codes``; both tables are
every role's, with RocketMQ 5's numbers, so a frame captured from a RocketMQ
controller reads the same here.
"""

from __future__ import annotations

from triomq.protocol.request_codes import RequestCode
from triomq.protocol.response_codes import ResponseCode

__all__ = ["RequestCode", "ResponseCode"]


