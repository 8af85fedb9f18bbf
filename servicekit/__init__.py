"""What every dsh service shares: typed settings, Kafka clients and topics, logging, the
watchdog and the interpreter loader. Below the services, above the codec and the core."""
