"""One device's Kafka stream as a sequence of batches: `KafkaDeviceStream`, the consumer's source of a
device stream (the simulator's is `edgestream.sim.stream.VirtualStream`), reading through a
`edgestream.consumers.device_stream.PartitionReader`.

A batch is taken by the sequence of `edgestream.streams.take`, written once in
`edgestream.streams.source.take_batch` (the decisions are `TakeRule.decide`, shared with the simulator);
this source implements its `StreamSource` protocol and supplies the counts from the broker: buffered = the consumer
lag (end offset - read position), arrived in the last window = end offset - the first offset whose
timestamp is inside the window (offsets_for_times, asked only when the rule reads it), and with a lag
bound (max_lag_s) where its last seconds begin (found among the messages read ahead, else asked).
`truncate` and the bound skip forward past the samples (counted in `dropped`); waiting is polling the
broker; `top_up` takes the samples that replace the ones the dataset rejected. The lag left after a
take is reported in samples and in seconds of data (`oldest_age_s`).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

from edgestream.consumers.broker_calls import BROKER_TIMEOUT_S
from edgestream.consumers.device_stream import PartitionReader
from edgestream.kafka.layout import StreamLayout
from edgestream.kafka.outage import Outage
from edgestream.kafka.topic_names import trainer_group
from edgestream.runner.driver import run_blocking
from edgestream.streams.source import TakeCounts, check_state, take_batch
from edgestream.streams.take import TakeDecision, TakeRule

#: version of `KafkaDeviceStream.state_dict()`
STATE_VERSION = 1

#: a lag bound (max_lag_s) reads at most this many messages ahead to find where its seconds begin: a
#: skip within them needs no seek (a seek and the fetch after it cost ~100 ms, a time lookup ~10 ms)
READ_AHEAD = 5000


@dataclass
class RawBatch:
    """Undecoded messages of one batch plus what the trainer needs to report and acknowledge it, and (the
    dataset's, while it takes the batch: `KafkaStreamDataset.next_batch`) the own samples accepted so far
    (decoded `parts`, `valid` of them), how many were rejected (`dlq`) and whether top-ups replaced them."""

    messages: list[Message]     # the batch's Kafka messages, in offset order
    next_offset: int            # commit this to acknowledge the batch (covers truncated samples too)
    target: int                 # b_i the batch policy asked for
    wait_s: float               # time spent waiting for samples
    dropped: int                # samples skipped by truncation before this batch
    buffer_samples: int         # unconsumed samples left after taking the batch (consumer lag)
    buffer_bytes: int
    rate: float                 # measured arrival rate used by the batch policy (samples/s)
    lag_s: float | None = 0.0   # seconds of data behind: age of the oldest unread sample (None: unknown)
    decision: TakeDecision | None = None  # what the take decided (its `refill` sizes the top-ups)
    parts: list = field(default_factory=list)  # DecodedBatch of the own samples accepted so far
    valid: int = 0
    dlq: int = 0
    topped_up: bool = False

    @property
    def values(self) -> list[bytes]:
        """The messages' values; a null value (a tombstone) is b"" (malformed: it goes to the DLQ)."""
        return [m.value() or b"" for m in self.messages]


class KafkaDeviceStream:
    """Batches of one device's Kafka stream, shaped by a buffer policy and a batch policy
    (edgestream.streams) through the shared take sequence (`TakeRule`)."""

    def __init__(self, bootstrap: str, run: str, device: int, *, batch_policy, buffer_policy,
                 window_s: float = 1.0, security: dict | None = None, group: str | None = None,
                 broker_timeout_s: float = BROKER_TIMEOUT_S, outage: Outage | None = None,
                 max_lag_s: float | None = None, layout: StreamLayout | None = None,
                 start: str | int = "earliest") -> None:
        self.device, self.window_s = device, window_s
        self.rule = TakeRule(buffer_policy, batch_policy, window_s, max_lag_s)
        layout = layout if layout is not None else StreamLayout(run, device + 1)
        topic, partition = layout.stream(device)
        # a shared partition (layout partitioned): counts are of this device's messages (`PartitionReader.own`)
        self.reader = PartitionReader(bootstrap, topic, group or trainer_group(run, device), security,
                                      broker_timeout_s=broker_timeout_s, outage=outage, partition=partition,
                                      keep=layout.keep(device), share=layout.share(device), start=start)
        if self.rule.measures_window or max_lag_s is not None:  # lookups by time to come: their client made now,
            self.reader.warm_lookups()                         # not in the middle of the first take
        self.dropped_total = 0
        self._avg_msg_bytes = 0.0
        self._high: int | None = None
        self._last_ts: float | None = None  # produce time (unix s, the message timestamp) of the newest taken
        self._t0 = time.monotonic()          # when the take being made began (`counts`)

    def _arrivals_in_window(self) -> int:
        start = self.reader.offset_for_time(int((time.time() - self.window_s) * 1000))
        return self.reader.own(self.reader.high_watermark() - start)

    def oldest_age_s(self) -> float | None:
        """Seconds of data behind: how long ago the oldest unread sample was produced, from the timestamp
        of the newest one taken (the oldest unread follows it); None before any was taken."""
        return None if self._last_ts is None else max(0.0, time.time() - self._last_ts)

    def take_raw(self, timeout: float | None = None, size: int | None = None) -> RawBatch | None:
        """The next batch, waiting for the policy's b_i samples (or exactly `size`, when given); None if
        `timeout` passes first: the shared take sequence (`take_batch`) on this stream. Samples the dataset
        rejects are replaced by `top_up`."""
        return run_blocking(take_batch(self, size, timeout))

    # ------------------------------------------------------------------ StreamSource
    def counts(self) -> TakeCounts:
        """Buffered (the consumer lag), arrived in the last window (a broker lookup, only when the rule
        reads it) and, with a lag bound, in its last max_lag_s seconds (only when the oldest buffered
        sample may be older than that). The take's wait starts here."""
        self._t0 = time.monotonic()
        reader, rule = self.reader, self.rule
        reader.flush_commits()
        if rule.measures_window:
            high, available = None, reader.lag()
            arrived = self._arrivals_in_window()
        else:
            high, arrived = reader.high_watermark(), None
            available = reader.available(high)
        recent = None
        if available and rule.needs_recent(self.oldest_age_s()):
            start = self._bound_start(int((time.time() - rule.max_lag_s) * 1000))
            high = reader.high_watermark()  # what was read ahead may be newer than the count above
            available = reader.available(high)
            recent = reader.own(high - start)
        self._high = high
        return TakeCounts(available, arrived, recent)

    def skip(self, n: int) -> int:
        """Skip the `n` oldest own samples (a shared partition: own messages, else offsets); how many were."""
        reader = self.reader
        dropped = reader.drop(n) if reader.keep is not None else reader.skip_to(reader.next_offset + n)
        self.dropped_total += dropped
        return dropped

    def wait(self, decision: TakeDecision, timeout: float | None = None) -> Generator[Any, Any, bool]:
        """Poll the broker until the batch is ready (False: `timeout` passed since `counts`). Blocks."""
        if self._high is None:
            self._high = self.reader.high_watermark()
        return self._wait(decision.target, decision.ready, self._t0, timeout)
        yield  # a generator that never yields: waiting blocks

    def take(self, decision: TakeDecision, dropped: int) -> RawBatch:
        """The `decision.target` oldest samples (the dataset adds the injected ones) and the lag after."""
        messages = self._take(decision.target)
        lag, nbytes, lag_s = self._backlog(self._high)
        return RawBatch(messages, self.reader.next_offset, decision.target, time.monotonic() - self._t0, dropped,
                        lag, nbytes, decision.rate, lag_s, decision)

    # ------------------------------------------------------------------ Stateful
    def state_dict(self) -> dict[str, Any]:
        """The read position (the next offset to take) and the samples dropped so far: plain ints."""
        return {"version": STATE_VERSION, "device": self.device, "offset": int(self.reader.next_offset),
                "dropped_total": int(self.dropped_total)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue at the position in `state` (`seek`: it becomes the group's committed offset)."""
        state = check_state(state, "KafkaDeviceStream", STATE_VERSION, ("device", "offset", "dropped_total"))
        if state["device"] != self.device:
            raise ValueError(f"the stream state is device {state['device']}'s; this stream is device {self.device}'s")
        self.seek(int(state["offset"]))
        self.dropped_total = int(state["dropped_total"])

    def _bound_start(self, cutoff_ms: int) -> int:
        """Where the last max_lag_s seconds begin: the first offset with a timestamp >= cutoff_ms, found
        among the messages read ahead (up to READ_AHEAD from the consumer's prefetched queue: skipping
        within them needs no seek), else asked of the broker (offsets_for_times; the skip then seeks)."""
        reader = self.reader
        while True:
            found = reader.first_at_or_after(cutoff_ms)
            if found is not None:
                return found
            if reader.queued >= READ_AHEAD or not reader.fill(0.0, max_messages=READ_AHEAD - reader.queued):
                return reader.offset_for_time(cutoff_ms)

    def top_up(self, n: int, need: int, timeout: float | None = None) -> list[Message] | None:
        """Up to `n` more messages for the batch being taken, once at least `need` are there (a batch's
        rejected samples are replaced: `TakeDecision.refill`); None if `timeout` passes first."""
        if not self._wait(n, lambda queued: queued >= need, time.monotonic(), timeout):
            return None
        return self._take(n)

    def backlog(self) -> tuple[int, int, float | None]:
        """(samples, estimated bytes, seconds of data) left unread now: the consumer lag."""
        return self._backlog(self.reader.high_watermark())

    def _wait(self, n: int, ready, t0: float, timeout: float | None) -> bool:
        """Fetch until `n` are queued, or fewer once `ready(queued)` and no more came (False: `timeout`
        passed while not ready). Only what the batch misses is fetched (librdkafka prefetches in its own
        thread; small consume() calls keep a batch's bytes in cache from fetch to tensor)."""
        reader = self.reader
        while reader.queued < n:
            ok = ready(reader.queued)
            if not ok and timeout is not None and time.monotonic() - t0 > timeout:
                return False
            reader.check_broker()
            got = reader.fill(0.0 if ok else 0.05, max_messages=n - reader.queued)
            if ok and got == 0:
                break
        return True

    def _take(self, n: int) -> list[Message]:
        messages = self.reader.take(n)
        if messages:  # the buffer's bytes are estimated from the newest batch's message sizes
            last = messages[-1]
            self._avg_msg_bytes = (len(messages[0]) + len(last)) / 2
            kind, ts = last.timestamp()
            if kind != TIMESTAMP_NOT_AVAILABLE and ts >= 0:
                self._last_ts = ts / 1000.0
        return messages

    def untake(self, messages: list[Message]) -> None:
        """Put back `messages`, the newest taken and none of them handed out (PartitionReader.untake): a
        block of batches taken ahead (KafkaStreamDataset) that is not handed out as taken."""
        self.reader.untake(messages)

    def backlog_behind(self, lag: int, last: Message) -> tuple[int, int, float | None]:
        """(samples, estimated bytes, seconds of data) of a backlog of `lag` unread samples after `last`, the
        newest sample handed out (a batch of a block taken ahead: the samples taken after it count as
        unread): the lag of `_backlog`, its seconds the age of `last`."""
        if not lag:
            return 0, 0, 0.0
        kind, ts = last.timestamp()
        age = max(0.0, time.time() - ts / 1000.0) if kind != TIMESTAMP_NOT_AVAILABLE and ts >= 0 \
            else self.oldest_age_s()
        return lag, int(lag * self._avg_msg_bytes), age

    def _backlog(self, high: int) -> tuple[int, int, float | None]:
        lag = self.reader.available(high)
        return lag, int(lag * self._avg_msg_bytes), (self.oldest_age_s() if lag else 0.0)

    def seek(self, offset: int) -> None:
        """Continue the stream at `offset` (PartitionReader.seek: queue dropped, group offset committed)."""
        self.reader.seek(offset)
        self._last_ts = None  # the lag there is unknown until a batch is taken (a lag bound then asks)

    def ack(self, next_offset: int, wait: bool = True) -> None:
        self.reader.commit(next_offset, wait)

    def close(self, wait: bool = True) -> None:
        self.reader.close(wait)
