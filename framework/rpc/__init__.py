"""Request/response over any trio byte stream, in RocketMQ remoting frames.

The pieces (one module each):

- ``RpcConnection`` (``connection``) drives one stream in both directions:
  it answers requests with the handlers it was given (by request code) and
  correlates its own requests with their responses by ``opaque``. Any
  number of calls may be in flight on one connection; a caller waits for its
  response without a task or cancel scope of its own. Requests run in the
  connection's worker tasks, which take turns reading.
- ``RpcServer`` (``server``) accepts connections from a ``Listener`` and
  serves each in its own task.
- ``RpcClient`` (``client``, built by ``open_rpc_client``) keeps one
  connection per address, opened on first use with any transport's
  ``connect`` and reopened after a loss, with exponential backoff between
  failed attempts::

      async with open_rpc_client(node.connect) as rpc:
          response = await rpc.invoke("tcp://10.0.0.2:9878", 1004,
                                      {"brokerName": "broker-a"}, timeout=3.0)

- The errors calls raise (``errors``) and naming a stream's far end (``peer``).

A handler is ``async def handler(request, peer) -> RemotingCommand | None``
where ``peer`` is the ``RpcConnection`` the request came in on (a handler may
``invoke`` back over it). It returns a response (its ``opaque`` and response
flag are filled in for it) or ``None``, which answers an empty SUCCESS. An
unknown request code is answered REQUEST_CODE_NOT_SUPPORTED, a handler that
raises is answered SYSTEM_ERROR with the error as the remark, and a request
beyond ``max_concurrent_requests`` on one connection is answered
SYSTEM_BUSY. Oneway requests get no answer. Calls raise ``RpcTimeout`` or
``RpcConnectionError``; a response with an error code is returned as is.

A peer that sends a bad frame, announces a frame larger than
``max_frame_size`` or a header larger than ``max_header_size``, stalls in
the middle of a frame, or leaves our writes unread for longer than
``stall_timeout`` has its connection closed with the reason logged (logger
``triomq.rpc``); nothing else is affected. A request with more than
``max_ext_fields`` extFields is answered SYSTEM_ERROR before any handler
runs. A server keeps at most ``max_connections`` connections, at most
``max_connections_per_peer`` of them from one host.
"""

from triomq.rpc.client import Backoff, Connect, RpcClient, open_rpc_client
from triomq.rpc.connection import DEFAULT_TIMEOUT, ConnectionLimits, Handler, RpcConnection
from triomq.rpc.errors import RpcConnectionError, RpcError, RpcTimeout
from triomq.rpc.peer import describe_peer
from triomq.rpc.server import RpcServer

__all__ = [
    "DEFAULT_TIMEOUT",
    "Backoff",
    "Connect",
    "ConnectionLimits",
    "Handler",
    "RpcClient",
    "RpcConnection",
    "RpcConnectionError",
    "RpcError",
    "RpcServer",
    "RpcTimeout",
    "describe_peer",
    "open_rpc_client",
]
