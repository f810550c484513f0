"""Raft in DLedger's style, sans-I/O: quorums, joint consensus, the log, push replication,
read index, the byte codec (node drives it over trio)."""
