"""Sending: a put, from its request to its answer (``processor`` drives ``core.put_flow``)."""
