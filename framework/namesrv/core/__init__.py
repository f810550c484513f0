"""The name server's rules, sans-I/O: the route table, the KV config, its request
handling and properties (service serves them over trio)."""
