"""The secondary messages' rules (sans-I/O): where a put is stored, the schedule, send-
back and transaction flows."""
