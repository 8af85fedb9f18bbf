"""The single-writer service and ``SessionClient`` (exactly-once appends over Kafka)."""
