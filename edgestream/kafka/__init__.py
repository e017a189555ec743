"""Kafka plumbing: the managed local broker, topic admin, client configs and topic names."""

from edgestream.kafka.admin import (
                                    KafkaUnavailable,
                                    create_topics,
                                    delete_run_topics,
                                    delete_topics,
                                    list_topics,
                                    wait_for_broker,
)
from edgestream.kafka.broker import MAX_MESSAGE_BYTES, LocalBroker, free_port, port_in_use
from edgestream.kafka.clients import admin_config, client_config, consumer_config, producer_config
from edgestream.kafka.jars import DEFAULT_KAFKA_VERSION, BrokerError, resolve_jars
from edgestream.kafka.topic_names import device_topic, dlq_topic, injection_topic, new_run_id, ps_topic, run_name

__all__ = [
    "DEFAULT_KAFKA_VERSION", "MAX_MESSAGE_BYTES", "BrokerError", "KafkaUnavailable", "LocalBroker",
    "admin_config", "client_config", "consumer_config", "create_topics", "delete_run_topics",
    "delete_topics", "device_topic", "dlq_topic", "free_port", "injection_topic", "list_topics",
    "new_run_id", "port_in_use", "producer_config", "ps_topic", "resolve_jars", "run_name",
    "wait_for_broker",
]
