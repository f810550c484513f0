"""The controller's pure core: who is master of each broker replica group.

RocketMQ 5's controller mode (RIP-44) keeps, per broker group, its replicas,
its master with ``master_epoch`` and its SyncStateSet with
``sync_state_set_epoch``, in a state machine replicated by Raft. This
package is that state machine and its inputs, with no trio, clock or I/O:

- ``codes``: request and response codes (RocketMQ's numbers).
- ``group``: ``BrokerGroup`` / ``BrokerMember``, the state of one group.
- ``events``: the five state-machine events and their log-entry encoding.
- ``replicas_info``: ``ReplicasInfoManager``, request validation -> ``ControllerResult``
  (code, remark, events, payload) and ``apply(event)``; ``snapshot`` / ``restore``.
- ``transitions``: how each committed event changes the state.
- ``results``: ``ControllerResult`` and the response payloads.
- ``election``: the election policy interface, ``BrokerLiveInfo`` and
  ``default_election_policy`` (RocketMQ's).
- ``heartbeat``: ``BrokerHeartbeatTable``, the active controller's live-info
  table; time is an argument.
- ``snapshot``: the snapshot encoding and the state's invariants.
- ``history``: the commit point of controllers' logs read from disk, and the
  replay of their committed events into master and SyncStateSet histories.

Around that core, still on the framework side:

- ``config``: ``ControllerConfig``, the ``[controller]`` section of a node.
- ``wire``: the request headers and JSON bodies on the wire (RocketMQ-style;
  RocketMQ's own shapes where its mqadmin reads the answer).
- ``requests``: controller requests and replies as values, read from and
  written to remoting commands.
- ``state_machine``: ``ReplicasStateMachine``, the manager as the Raft
  node's state machine (committed entries are encoded events).
- ``service_core``: ``ControllerCore``, every rule of the controller
  service (leader-only serving, read barriers, one state change at a time,
  answering once committed, heartbeats, the inactive-broker scan and its
  elections); pure, run by the trio service and by the cluster simulation.
- ``client``: ``ControllerClient``, what brokers and admin tools use to reach
  the active controller (following NOT_LEADER hints, retrying across leader
  changes).

The controller service (``plugins/controller_dledger``) is the trio pump of
``service_core`` over a Raft node whose state machine is ``state_machine``.
"""

from triomq.controller.core.codes import RequestCode, ResponseCode
from triomq.controller.core.election import (
    BrokerLiveInfo,
    ElectionPolicy,
    LiveInfoLookup,
    default_election_policy,
)
from triomq.controller.core.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    Event,
    EventDecodeError,
    UpdateBrokerAddressEvent,
    decode_event,
    encode_event,
)
from triomq.controller.core.group import FIRST_BROKER_ID, BrokerGroup, BrokerMember
from triomq.controller.core.heartbeat import BrokerHeartbeatTable, HeartbeatRecord
from triomq.controller.core.replicas_info import ReplicasInfoManager
from triomq.controller.core.results import ControllerResult
from triomq.controller.core.snapshot import SnapshotError

__all__ = [
    "FIRST_BROKER_ID",
    "AlterSyncStateSetEvent",
    "ApplyBrokerIdEvent",
    "BrokerGroup",
    "BrokerHeartbeatTable",
    "BrokerLiveInfo",
    "BrokerMember",
    "CleanBrokerDataEvent",
    "ControllerResult",
    "ElectMasterEvent",
    "ElectionPolicy",
    "Event",
    "EventDecodeError",
    "HeartbeatRecord",
    "LiveInfoLookup",
    "ReplicasInfoManager",
    "RequestCode",
    "ResponseCode",
    "SnapshotError",
    "UpdateBrokerAddressEvent",
    "decode_event",
    "default_election_policy",
    "encode_event",
]
