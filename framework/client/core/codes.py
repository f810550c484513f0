"""The request and response codes a client speaks: RocketMQ's two tables.

The requests it sends to name servers and brokers, and the ones a broker
sends it (CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED,
GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY), are numbered in
``triomq.protocol.request_codes``; the answers it reads in
``triomq.protocol.response_codes``. Both tables are every role's.
"""

from __future__ import annotations

from triomq.protocol.request_codes import RequestCode
from triomq.protocol.response_codes import ResponseCode

__all__ = ["RequestCode", "ResponseCode", "code_name"]



def code_name(code: int) -> str:
    """``NAME (n)`` for a known response code, the number otherwise."""
    try:
        return f"{ResponseCode(code).name} ({code})"
    except ValueError:
        return str(code)
