"""The admin views' tables and counters (sans-I/O)."""
