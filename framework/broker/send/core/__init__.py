"""The put's rules (sans-I/O): its checks, its flow and RocketMQ's batch body."""
