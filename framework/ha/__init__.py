"""AutoSwitch HA: epoch cache, truncation, and the master/slave replication state machines.

Pure (no trio, no clock, no I/O): ``epoch``, ``master``, ``slave``,
``sync_state``, ``sync_replication``, ``master_term`` (a master term's
SyncStateSet proposals and synchronous puts), ``reconnect`` (a slave's
backoff). With I/O: ``checkpoint`` (the epoch file), ``roles`` (log and
epochs on a role change), ``driver``, ``master_driver``, ``slave_driver``
(trio) and ``streams`` (the drivers' bulk sends and receives).
"""
