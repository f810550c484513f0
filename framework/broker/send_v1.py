"""SEND_MESSAGE 10: a send whose header spells its fields out.

RocketMQ's first send request carries a ``SendMessageRequestHeader``: the
fields of the ``SendMessageRequestHeaderV2`` that SEND_MESSAGE_V2 and
SEND_BATCH_MESSAGE carry, under their full names (``producerGroup`` for
``a``, ``topic`` for ``b``... ``maxReconsumeTimes`` for ``l``, ``batch``
for ``m``). RocketMQ's Go client sends every single message (sync, async
and one-way) this way. As RocketMQ's ``SendMessageProcessor`` does, the
header is read as the V2 one and its ``batch`` field decides: a batch is
served as SEND_BATCH_MESSAGE, anything else as SEND_MESSAGE_V2, with their
checks, refusals and answers. Fields of other names (``bname``...) pass
on unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from triomq.broker.batch_send import BatchSendHandler
from triomq.broker.codes import SEND_V2_FIELDS, RequestCode
from triomq.broker.processor import BrokerProcessor
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcConnection, RpcServer

__all__ = ["SendV1Handler", "v2_fields"]

#: ``SendMessageRequestHeader``'s names of the V2 header's one-letter keys (RocketMQ's
#: ``createSendMessageRequestHeaderV1`` maps ``l`` to ``maxReconsumeTimes``).
_V1_NAMES = {**{name: key for key, name in SEND_V2_FIELDS.items()
                if key not in ("l", "n")}, "maxReconsumeTimes": "l"}


def v2_fields(fields: Mapping[str, str]) -> dict[str, str]:
    """A ``SendMessageRequestHeader``'s fields under the V2 header's keys."""
    return {_V1_NAMES.get(name, name): value for name, value in fields.items()}


class SendV1Handler:
    """Serves SEND_MESSAGE through the V2 and batch send handlers."""

    def __init__(self, processor: BrokerProcessor, batches: BatchSendHandler) -> None:
        self.processor = processor
        self.batches = batches

    def register(self, server: RpcServer) -> None:
        server.register(RequestCode.SEND_MESSAGE, self.send_message)

    async def send_message(self, request: RemotingCommand, peer: RpcConnection
                           ) -> RemotingCommand:
        as_v2 = attrs.evolve(request, ext_fields=v2_fields(request.ext_fields))
        # Java's Boolean.parseBoolean: "true" in any case, anything else is false.
        if as_v2.ext_fields.get("m", "").lower() == "true":
            return await self.batches.send_batch(as_v2, peer)
        return await self.processor.send_message(as_v2, peer)
