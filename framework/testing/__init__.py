"""Test helpers for triomq: pytest fixtures, conformance suites and deterministic simulation."""
