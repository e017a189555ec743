"""Calls to one Kafka broker through an outage: `BrokerCalls`, the retry loop of a trainer's readers
(edgestream.consumers.device_stream), counted against the process's `Outage` (runtime.kafka_outage_s)."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException

from edgestream.kafka.admin import KafkaUnavailable
from edgestream.kafka.outage import Outage

#: errors that no retry cures: raised at once, naming the address
FATAL = {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.TOPIC_AUTHORIZATION_FAILED,
         KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._INVALID_ARG,
         KafkaError.CLUSTER_AUTHORIZATION_FAILED}

#: how long a consumer keeps retrying a broker that does not answer (at start, or mid-stream while it
#: bounces) before it raises KafkaUnavailable naming the bootstrap address, when it is given no `Outage`
#: (the trainer gives one: runtime.kafka_outage_s)
BROKER_TIMEOUT_S = 300.0


class BrokerCalls:
    """Calls to one broker through an outage: transient errors (a broker starting, bouncing, electing a
    leader, a coordinator loading) are retried with exponential backoff while the process's `Outage` has
    budget left (runtime.kafka_outage_s, counted from when Kafka stopped answering); then KafkaUnavailable
    names the bootstrap address and the budget. Errors no retry cures raise at once. `patient = False` (a
    process that is ending anyway): a call that gets no answer raises KafkaUnavailable at once."""

    def __init__(self, bootstrap: str, timeout_s: float = BROKER_TIMEOUT_S, refresh=None,
                 outage: Outage | None = None) -> None:
        self.bootstrap, self.refresh = bootstrap, refresh
        self.outage = outage if outage is not None else Outage(bootstrap, timeout_s)
        self.patient = True

    def __call__(self, fn, what: str):
        """fn(call_timeout) -> result; raise KafkaException for a retriable failure."""
        outage = self.outage
        backoff = 0.1
        while True:
            try:
                result = fn(max(0.5, min(outage.left(), 5.0)) if self.patient else 1.0)
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() in FATAL or err.fatal():
                    raise RuntimeError(f"{what} at {self.bootstrap} failed: {err.str()}") from None
                if not self.patient:
                    raise KafkaUnavailable(f"{what}: Kafka at {self.bootstrap} did not answer ({err.str()}); not "
                                           "waiting: the process is ending") from None
                outage.down(what, error=err.str())  # KafkaUnavailable once the budget is spent
            else:
                outage.up()
                return result
            time.sleep(min(backoff, max(0.05, outage.left())))
            backoff = min(backoff * 2, 2.0)
            if self.refresh is not None:  # a leader moved or the broker came back: ask for fresh metadata
                try:
                    self.refresh(min(2.0, max(0.1, outage.left())))
                except KafkaException:
                    pass
