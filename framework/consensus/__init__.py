"""Raft consensus for triomq: pure state machines and one thin trio driver.

The modules, one concept each:

- ``quorum``: majority and joint quorums (committed index, vote results).
- ``confchange``: configurations and the joint-consensus ``Changer``.
- ``tracker``: the leader's per-peer replication progress.
- ``log``: entries, snapshots, hard state and the in-memory log mirror.
- ``messages``: the RPC messages exchanged by Raft peers (DLedger style).
- ``codec``: those messages as bytes, under DLedger request codes.
- ``ready``: what a step produces: writes to persist, messages, entries to apply.
- ``raft``: the Raft state machine itself (API, roles, elections, ``Ready``),
  with its leader side in ``pusher`` and its follower side in ``handler``.
- ``applier``: the application side of a ``Ready``, shared by every driver:
  the ``StateMachine`` applies committed entries, proposers and readers
  are settled.

Nothing above imports trio, reads a clock or touches I/O. The driver feeds
ticks and messages in and carries out the ``Ready`` it gets back:

- ``config``: ``RaftConfig``, the documented settings of a Raft node;
- ``durable``: the entry log and snapshot from a store plugin, persisted in
  the order ``Ready`` demands;
- ``node``: ``open_raft_node`` / ``RaftNode`` (propose, propose_nowait,
  read_index, membership changes, leadership transfer) over RPC, for
  library users with their own ``StateMachine``;
- ``waiting``: the node's waiters (a parked task or a callback) and their
  deadlines.
"""
