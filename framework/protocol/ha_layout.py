"""The HA frames' layout: the connection states, the field sizes and the frame values.

What every frame carries in its ``state`` field (``HAConnectionState``),
how big each part of a frame is, the error a malformed one raises, and the
values ``triomq.protocol.ha_encode`` turns into bytes and
``triomq.protocol.ha_decode`` turns bytes back into. The frames themselves
are drawn in ``triomq.protocol.ha``.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

import attrs

from triomq.errors import TriomqError


class HAConnectionState(enum.IntEnum):
    """The state of an HA connection; its ordinal is the frames' ``state`` field."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


class HAFrameError(TriomqError, ValueError):
    """A frame is malformed; ``where`` names the frame and field at fault."""

    def __init__(self, message: str, where: str) -> None:
        self.where = where
        super().__init__(f"HA frame {where}: {message}")


#: The ``state`` of triomq's credential frame, which RocketMQ's HA does not have: a
#: slave sends it before its handshake when the nodes authenticate each other
#: (``triomq.node_auth``). No ``HAConnectionState`` is near it.
CREDENTIAL_STATE = 100
#: A credential frame's largest body: a handful of short fields.
MAX_CREDENTIAL_SIZE = 2048
CREDENTIAL_HEADER_SIZE = 4 + 4
SLAVE_HANDSHAKE_SIZE = 4 + 2 + 2 + 8
ACK_SIZE = 4 + 8
MASTER_HANDSHAKE_HEADER_SIZE = 4 + 4 + 8 + 4
TRANSFER_HEADER_SIZE = 4 + 4 + 8 + 4 + 8 + 8
EPOCH_ENTRY_SIZE = 4 + 8
#: Default bound on a master frame's body; callers usually pass their own
#: (a few transfer batches).
DEFAULT_MAX_BODY_SIZE = 64 * 1024 * 1024
#: RocketMQ's "none" in a transfer: the offset of a heartbeat from a master whose
#: log has no file yet, and the confirmOffset of a master that has not counted one.
NO_OFFSET = -1

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1

_SLAVE_HANDSHAKE = struct.Struct(">ihhq")
_CREDENTIAL_HEADER = struct.Struct(">ii")
_ACK = struct.Struct(">iq")
_MASTER_HANDSHAKE_HEADER = struct.Struct(">iiqi")
_TRANSFER_HEADER = struct.Struct(">iiqiqq")
_EPOCH_ENTRY = struct.Struct(">iq")
_TRANSFER = int(HAConnectionState.TRANSFER)


@attrs.frozen
class SlaveHandshake:
    """The slave's opening frame: who it is (its broker id in the group) and how it
    wants to sync."""

    broker_id: int
    is_sync_from_last_file: bool = False
    is_async_learner: bool = False


@attrs.frozen
class Credential:
    """What proves a slave's handshake is that slave's: string fields, JSON on the wire
    (``state:4 | bodySize:4 | body``)."""

    fields: tuple[tuple[str, str], ...]

    def mapping(self) -> dict[str, str]:
        return dict(self.fields)


@attrs.frozen
class Ack:
    """The slave's report of its commit log's max offset."""

    max_offset: int


@attrs.frozen
class EpochStart:
    """One entry of the master's epoch list: an epoch and where it starts."""

    epoch: int
    start_offset: int


@attrs.frozen
class MasterHandshake:
    """The master's answer to a handshake: its max offset, epoch and epoch list."""

    max_offset: int
    epoch: int
    epochs: tuple[EpochStart, ...]


@attrs.frozen
class Transfer:
    """A batch of commit-log bytes starting at ``offset``, all in one epoch.

    An empty ``body`` is a heartbeat; only a heartbeat's ``offset`` may be
    ``NO_OFFSET``, and ``confirm_offset`` may be ``NO_OFFSET`` (none yet).
    What ``encode`` takes; decoding yields a ``TransferHeader`` and the body
    in ``TransferBody`` pieces instead.
    """

    offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int
    body: bytes | memoryview = b""


class TransferHeader(NamedTuple):
    """A transfer's header, as decoded: ``body_size`` bytes of body follow.

    A tuple, as ``TransferBody``: one of each is built per batch.
    """

    offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int
    body_size: int


class TransferBody(NamedTuple):
    """The next bytes of the current transfer's body: a read-only view of the fed chunk."""

    data: memoryview


class TransferRun(NamedTuple):
    """Transfers that continue a run, taken at once (``transfer_run``)."""

    #: Where the headers' bytes go on after them.
    pos: int
    #: How many transfers.
    count: int  # type: ignore[assignment]  # a field, not tuple.count
    #: Their body bytes at hand (all but the last one's ``body_remaining``).
    taken: int
    #: The largest bodySize among them (0 if none).
    largest_body: int
    #: The highest confirmOffset among them, each capped at its body's end
    #: as far as taken (-1 if none).
    confirm_offset: int
    #: The last one's confirmOffset (-1 if none).
    last_confirm_offset: int
    #: Bytes of the last one's body not at hand: still to come.
    body_remaining: int


SlaveFrame = Credential | SlaveHandshake | Ack
MasterFrame = MasterHandshake | Transfer
#: What ``MasterFrameDecoder`` turns a master's bytes into.
MasterEvent = MasterHandshake | TransferHeader | TransferBody
