"""Pop consumption: POP_MESSAGE, its acks and the revive of what was not acked."""
