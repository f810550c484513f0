"""RocketMQ's ``index/`` files and the queries that read them."""
