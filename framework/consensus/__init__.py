"""Raft consensus for triomq, built as pure state machines.

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

Nothing here imports trio, reads a clock or touches I/O; a driver feeds
ticks and messages in and carries out the ``Ready`` it gets back.
"""
