"""AutoSwitch HA's state machines, sans-I/O: the master's and the slave's side of a
connection, the epoch cache, SyncStateSet bookkeeping, a replica's role change
(driver, master_driver and slave_driver run them over trio)."""
