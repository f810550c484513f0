"""What the broker's controller-mode flow and its pumps pass each other.

``ControllerModeFlow`` (``triomq.broker.replication.core.controller_flow``) asks for its
requests to the active controller (the controller's own request values) as
``Call`` outputs and is answered with an ``ControllerAnswer``; its other outputs are
what the pump carries out (save the identity, send a heartbeat, take a
role) or reports (a registration, a proposal's outcome, a log line). Plain
values, for the flow, its pumps and their tests alike.
"""

from __future__ import annotations

import attrs

from triomq.broker.core.identity import BrokerIdentity
from triomq.controller.core.codes import ResponseCode
from triomq.controller.core.requests import (
    AlterSyncStateSet,
    ApplyBrokerId,
    ElectMaster,
    GetNextBrokerId,
    GetReplicaInfo,
    Payload,
    RegisterBroker,
)

#: What the flow asks the active controller: the controller's own request values
#: (``triomq.controller.core.requests``), which its client writes and its core reads.
ControllerRequest = (GetNextBrokerId | ApplyBrokerId | RegisterBroker | ElectMaster
                     | GetReplicaInfo | AlterSyncStateSet)


@attrs.frozen
class ControllerAnswer:
    """The active controller's answer: its code, remark and payload (the controller
    core's ``Payload``, as ``triomq.controller.core.requests.read_reply`` reads it)."""

    code: int
    remark: str = ""
    payload: Payload | None = None

    @property
    def ok(self) -> bool:
        """Whether the request succeeded."""
        return self.code == ResponseCode.SUCCESS


# -- outputs ---------------------------------------------------------------------------


@attrs.frozen
class Call:
    """Make ``request`` to the active controller; answer with ``answered(now, id, ...)``."""

    id: int
    request: ControllerRequest


@attrs.frozen
class SendHeartbeat:
    """BROKER_HEARTBEAT to ``controller``; report ``heartbeat_sent`` once it went out.

    The pump adds the live info: the epoch of the current term, else
    ``recorded_epoch``; the log's max offset; the confirm offset.
    """

    controller: str
    broker_id: int
    recorded_epoch: int


@attrs.frozen
class SaveIdentity:
    """Save ``identity`` durably, then report ``identity_saved``."""

    identity: BrokerIdentity


@attrs.frozen
class Registered:
    """The controllers registered this replica as ``broker_id``."""

    broker_id: int


@attrs.frozen
class TakeMaster:
    """Serve as master of ``epoch``, as broker ``broker_id``, with ``sync_state_set``
    (broker ids); then report ``followed``."""

    epoch: int
    broker_id: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@attrs.frozen
class TakeSlave:
    """Follow the master at broker address ``master_address`` as broker ``broker_id``;
    then report ``followed``."""

    master_address: str
    epoch: int
    broker_id: int


@attrs.frozen
class LearnSyncStateSet:
    """The master's own term: the controller's committed SyncStateSet (broker ids)."""

    sync_state_set: frozenset[int]


@attrs.frozen
class ProposalOutcome:
    """How proposal ``token`` ended: the controller's set (None: unknown) or ``fenced``."""

    token: int
    sync_state_set: frozenset[int] | None
    #: Why a newer master fences this term; empty when not fenced.
    fenced: str = ""


@attrs.frozen
class Log:
    """Something worth telling the operator."""

    text: str
    warning: bool = True


Output = (Call | SendHeartbeat | SaveIdentity | Registered | TakeMaster | TakeSlave
          | LearnSyncStateSet | ProposalOutcome | Log)
