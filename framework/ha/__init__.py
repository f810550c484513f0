"""AutoSwitch HA: epoch cache, truncation, and the master/slave replication state machines.

Pure (no trio, no clock, no I/O): ``epoch``, ``master``, ``slave``,
``sync_state``, ``sync_replication``. With I/O: ``checkpoint`` (the epoch
file), ``roles`` (log and epochs on a role change), ``driver`` (trio) and
``streams`` (the drivers' bulk sends and receives).
"""
