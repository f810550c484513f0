"""Secondary messages: delayed messages, retries and dead letters, transactions, as
master-term components."""
