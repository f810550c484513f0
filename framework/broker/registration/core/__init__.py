"""Registration's rules (sans-I/O)."""
