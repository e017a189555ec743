"""The parameter server reached through Kafka: wire format, transport, server process."""
