"""The client's rules, sans-I/O: messages, queue selection and one send's retries
through a failover, allocation, a queue's pulls, subscriptions, heartbeat bodies,
transactions (the producers and consumers drive them over trio)."""
