"""The index files' arithmetic (sans-I/O)."""
