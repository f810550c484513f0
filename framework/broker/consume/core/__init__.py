"""The consumption rules (sans-I/O): the pull flow, offsets, subscriptions, the client
table, locks."""
