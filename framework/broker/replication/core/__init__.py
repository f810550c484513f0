"""Controller mode's rules (sans-I/O) and the requests it sends the controller."""
