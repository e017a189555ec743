"""One device's Kafka stream as a sequence of batches, applying the streams/ policies to offsets.

The consumer belongs to a group named for the run and device, starts at the group's committed offset
(or the topic's first offset: data produced before the trainer connects is not lost), never
auto-commits, and commits only when the trainer acknowledges a batch (at-least-once).

Buffer: `persist` trains on the oldest unconsumed samples (the buffer is the consumer lag);
`truncate` first seeks forward to the first sample that arrived within the last window (Kafka's
offsets_for_times), counting every skipped sample in `dropped`. Batch size b_i comes from the batch
policy with the measured arrival rate (samples that arrived in the last window / window).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Message, TopicPartition

from edgestream.kafka.clients import consumer_config
from edgestream.kafka.topics import device_topic
from edgestream.streams.policies import PersistBuffer, RateBatch

_RETRIABLE = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
              KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}


#: how old the end offset read at start may be before the first fetch response replaces it
HIGH_WATERMARK_MAX_AGE_S = 0.5

#: asynchronous acks are coalesced into at most one commit request per this many seconds
ASYNC_COMMIT_INTERVAL_S = 0.1


def with_retries(fn, what: str, attempts: int = 12, backoff_s: float = 0.1):
    """Call fn(), retrying the group-coordinator errors a new or restarting broker answers with
    (the offsets topic is created on first use) with exponential backoff."""
    for attempt in range(attempts):
        try:
            return fn()
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() not in _RETRIABLE or attempt == attempts - 1:
                raise RuntimeError(f"{what} failed: {err.str()}") from exc
            time.sleep(min(backoff_s * 2 ** attempt, 2.0))
    raise AssertionError("unreachable")


def trainer_group(run: str, device: int, kind: str = "dev") -> str:
    """The consumer group of a run's device stream (kind 'dev') or injection topic (kind 'inj')."""
    return f"{run}.{kind}.{device}.trainer"


@dataclass
class RawBatch:
    """Undecoded messages of one batch plus what the trainer needs to report and acknowledge it."""

    messages: list[Message]     # the batch's Kafka messages, in offset order
    next_offset: int            # commit this to acknowledge the batch (covers truncated samples too)
    target: int                 # b_i the batch policy asked for
    wait_s: float               # time spent waiting for samples
    dropped: int                # samples skipped by truncation before this batch
    buffer_samples: int         # unconsumed samples left after taking the batch (consumer lag)
    buffer_bytes: int
    rate: float                 # measured arrival rate used by the batch policy (samples/s)

    @property
    def values(self) -> list[bytes]:
        """The messages' values; a null value (a tombstone) is b"" (malformed: it goes to the DLQ)."""
        return [m.value() or b"" for m in self.messages]


class PartitionReader:
    """A manually assigned single-partition consumer with a local queue of fetched messages.

    The queue holds the lists of messages `consume()` returned, as they came: no per-message Python
    objects are made between the consumer and the batch, so the hot path stays at the speed of a raw
    poll loop.
    """

    def __init__(self, bootstrap: str, topic: str, group: str, security: dict | None = None,
                 overrides: dict | None = None) -> None:
        self.topic = topic
        self.tp = TopicPartition(topic, 0)
        self.consumer = Consumer(consumer_config(bootstrap, group, security, **(overrides or {})))
        committed = with_retries(lambda: self.consumer.committed([TopicPartition(topic, 0)], timeout=30),
                                 f"reading the committed offset of group {group} on {topic}")[0].offset
        low, high = with_retries(lambda: self.consumer.get_watermark_offsets(self.tp, timeout=30),
                                 f"reading the offsets of {topic}")
        if committed == OFFSET_INVALID or committed < 0:
            committed = low
        self._high_seen, self._high_at = high, time.monotonic()  # until a fetch response brings the live one
        self.next_offset = committed        # oldest sample not yet handed out
        self.consumer.assign([TopicPartition(topic, 0, committed)])
        self._chunks: deque[list[Message]] = deque()  # fetched, not yet taken; offsets increase
        self._head = 0                      # first untaken index in _chunks[0]
        self.queued = 0                     # messages in the queue
        self._tail = committed              # offset after the last queued message
        self.committed = committed          # newest acknowledged offset
        self._sent, self._sent_at, self._async = committed, 0.0, False  # newest offset sent to the broker

    def fill(self, timeout: float, max_messages: int = 5000) -> int:
        """Fetch what is available (waiting up to `timeout` for `max_messages`); return how many arrived."""
        msgs = self.consumer.consume(max_messages, timeout=timeout)
        if not msgs:
            return 0
        if any(map(Message.error, msgs)):  # rare: keep the data, raise on anything but end-of-partition
            for m in msgs:
                err = m.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"consumer error on {self.topic}: {err}")
            msgs = [m for m in msgs if m.error() is None]
        if msgs and msgs[0].offset() < self._tail:  # behind a truncation seek
            msgs = [m for m in msgs if m.offset() >= self._tail]
        if not msgs:
            return 0
        self._chunks.append(msgs)
        self.queued += len(msgs)
        self._tail = msgs[-1].offset() + 1
        return len(msgs)

    def high_watermark(self) -> int:
        """The partition's end offset as of the last fetch response; before the first one, the value
        read at start (or, when that is older than HIGH_WATERMARK_MAX_AGE_S, asked of the broker)."""
        _, high = self.consumer.get_watermark_offsets(self.tp, cached=True)
        if high is None or high < 0:
            if time.monotonic() - self._high_at <= HIGH_WATERMARK_MAX_AGE_S:
                return max(self._high_seen, self._tail)
            _, high = self.consumer.get_watermark_offsets(self.tp, timeout=10)
        self._high_seen, self._high_at = high, time.monotonic()
        return max(high, self._tail)

    def lag(self) -> int:
        return max(0, self.high_watermark() - self.next_offset)

    def offset_for_time(self, ts_ms: int) -> int:
        """The first offset whose timestamp is >= ts_ms (the high watermark when none is)."""
        res = self.consumer.offsets_for_times([TopicPartition(self.topic, 0, ts_ms)], timeout=10)[0]
        return res.offset if res.offset >= 0 else self.high_watermark()

    def skip_to(self, offset: int) -> int:
        """Advance the read position to `offset`, dropping what lies before; return how many were skipped."""
        skipped = max(0, offset - self.next_offset)
        if skipped == 0:
            return 0
        chunks = self._chunks
        while chunks and chunks[0][-1].offset() < offset:
            self.queued -= len(chunks.popleft()) - self._head
            self._head = 0
        if chunks:
            first = bisect_left(chunks[0], offset, lo=self._head, key=Message.offset)
            self.queued -= first - self._head
            self._head = first
        else:
            self.consumer.seek(TopicPartition(self.topic, 0, offset))
            self._tail = offset
        self.next_offset = offset
        return skipped

    def take(self, n: int) -> list[Message]:
        """Up to `n` queued messages, oldest first."""
        taken: list[Message] = []
        chunks = self._chunks
        while n > 0 and chunks:
            chunk, head = chunks[0], self._head
            if len(chunk) - head <= n:
                taken += chunk[head:] if head else chunk
                n -= len(chunk) - head
                chunks.popleft()
                self._head = 0
            else:
                taken += chunk[head:head + n]
                self._head = head + n
                n = 0
        if taken:
            self.queued -= len(taken)
            self.next_offset = taken[-1].offset() + 1
        return taken

    def take_all(self) -> list[Message]:
        return self.take(self.queued)

    def commit(self, offset: int, wait: bool = True) -> None:
        """Commit `offset` (the next one to read).

        wait=True: durable before it returns. wait=False: asynchronous and coalesced -- at most one
        commit request per ASYNC_COMMIT_INTERVAL_S carries the newest acknowledged offset (the rest
        are sent by `flush_commits`, the next ack, or `close`); still at-least-once: a crash
        re-delivers what the broker had not recorded, never loses.
        """
        if offset <= self.committed:
            return
        self.committed = offset
        if wait:
            tp = [TopicPartition(self.topic, 0, offset)]
            with_retries(lambda: self.consumer.commit(offsets=tp, asynchronous=False),
                         f"committing offset {offset} on {self.topic}")
            self._sent = offset
        else:
            self.flush_commits()

    def flush_commits(self) -> None:
        """Send the newest acknowledged offset asynchronously if it is not sent yet and the last
        asynchronous commit is ASYNC_COMMIT_INTERVAL_S old."""
        now = time.monotonic()
        if self.committed > self._sent and now - self._sent_at >= ASYNC_COMMIT_INTERVAL_S:
            self.consumer.commit(offsets=[TopicPartition(self.topic, 0, self.committed)], asynchronous=True)
            self._sent, self._sent_at, self._async = self.committed, now, True

    def close(self) -> None:
        if self._async or self.committed > self._sent:  # make the last acknowledged offset durable
            tp = [TopicPartition(self.topic, 0, self.committed)]
            with_retries(lambda: self.consumer.commit(offsets=tp, asynchronous=False), f"final commit on {self.topic}")
        self.consumer.close()


class DeviceStream:
    """Batches of one device's stream, shaped by a buffer policy and a batch policy (edgestream.streams)."""

    def __init__(self, bootstrap: str, run: str, device: int, *, batch_policy, buffer_policy,
                 window_s: float = 1.0, security: dict | None = None, group: str | None = None) -> None:
        self.device, self.window_s = device, window_s
        self.batch_policy, self.buffer_policy = batch_policy, buffer_policy
        self.reader = PartitionReader(bootstrap, device_topic(run, device), group or trainer_group(run, device),
                                      security)
        self.dropped_total = 0
        self._avg_msg_bytes = 0.0
        self._high: int | None = None
        self._needs_window = not isinstance(buffer_policy, PersistBuffer) or isinstance(batch_policy, RateBatch)

    def _arrivals_in_window(self) -> int:
        start = self.reader.offset_for_time(int((time.time() - self.window_s) * 1000))
        return max(0, self.reader.high_watermark() - start)

    def take(self, timeout: float | None = None) -> RawBatch | None:
        """The next batch, waiting for the policy's b_i samples; None if `timeout` passes first."""
        t0 = time.monotonic()
        self.reader.flush_commits()
        dropped, rate = 0, 0.0
        if self._needs_window:  # truncation and rate-proportional batches look at the last window
            available = self.reader.lag()
            arrived = self._arrivals_in_window()
            skip = self.buffer_policy.truncate(available, arrived)
            dropped = self.reader.skip_to(self.reader.next_offset + skip) if skip > 0 else 0
            self.dropped_total += dropped
            rate = arrived / self.window_s
        self._high = self.reader.high_watermark()
        target = int(self.batch_policy.target(rate, max(0, self._high - self.reader.next_offset)))
        # Fetch exactly what the batch still misses: librdkafka prefetches in its own thread, and
        # small consume() calls keep each batch's bytes in cache from fetch to tensor. Wait (up to
        # 50 ms a call) while the policy is not ready; once it is, take only what is already here.
        while self.reader.queued < target:
            ready = self.batch_policy.ready(target, self.reader.queued)
            if not ready and timeout is not None and time.monotonic() - t0 > timeout:
                return None
            got = self.reader.fill(0.0 if ready else 0.05, max_messages=target - self.reader.queued)
            if ready and got == 0:
                break
        messages = self.reader.take(target)
        wait_s = time.monotonic() - t0
        if messages:  # the buffer's bytes are estimated from the newest batch's message sizes
            self._avg_msg_bytes = (len(messages[0]) + len(messages[-1])) / 2
        lag = max(0, self._high - self.reader.next_offset) if self._high is not None else self.reader.lag()
        return RawBatch(messages, self.reader.next_offset, target, wait_s, dropped, lag,
                        int(lag * self._avg_msg_bytes), rate)

    def ack(self, next_offset: int, wait: bool = True) -> None:
        self.reader.commit(next_offset, wait)

    def close(self) -> None:
        self.reader.close()
