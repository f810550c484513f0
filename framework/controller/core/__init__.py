"""The controller's rules, sans-I/O: the replicas-info state machine, election policy,
heartbeats, requests and their validation, the service's rules, snapshots, the wire
(service and client drive them over trio)."""
