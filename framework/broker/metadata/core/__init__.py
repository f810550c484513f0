"""The topic table (sans-I/O)."""
