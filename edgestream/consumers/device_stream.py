"""Reading one topic partition of samples: `PartitionReader` (a manually assigned consumer with a local
queue of fetched messages, commits on acknowledgement, waits through a Kafka outage), the consumer
groups' names (`trainer_group`) and `commit_offset`. The batches of a device stream are taken by
`edgestream.consumers.kafka_stream.KafkaDeviceStream` on top of it.

The consumer belongs to a group named for the run and device, starts at the group's committed offset
(or the topic's first offset: data produced before the trainer connects is not lost; an external stream's
`start` may say latest or a time instead), never
auto-commits, and commits only when the trainer acknowledges a batch (at-least-once).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from itertools import islice

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, Message, TopicPartition

from edgestream.consumers.broker_calls import BROKER_TIMEOUT_S, FATAL, BrokerCalls
from edgestream.kafka.admin import KafkaUnavailable
from edgestream.kafka.clients import consumer_config
from edgestream.kafka.leader_watch import LeaderWatch
from edgestream.kafka.outage import Outage
from edgestream.kafka.outage_calls import Probe, Wedge, answers
from edgestream.kafka.topic_names import trainer_group  # noqa: F401 - re-exported (consumer groups are named in kafka/)

#: how old the end offset read at start may be before the first fetch response replaces it
HIGH_WATERMARK_MAX_AGE_S = 0.5

#: what librdkafka reads ahead of a sample stream's reader, and in what pieces. Its defaults (100,000
#: messages or 64 MB queued, fetches of up to max.partition.fetch.bytes = the largest message, 17 MB)
#: made a trainer behind its stream grow by tens of MB: a message keeps its whole fetch response alive
#: while a batch (or an ack held back) refers to it. Still thousands of samples ahead; a larger message
#: than a fetch is still fetched whole (docs/BENCHMARKS.md, "A stream that outruns training"). Fetches of
#: 4 MB, not 1 MB: a reader catching up on a backlog waited for its 1 MB fetches (one in flight at a time)
#: and read ~0.6x a raw poll's rate; 4 MB costs ~12 MB more RSS behind a stream (docs/BENCHMARKS.md,
#: "Decode at its floor")
STREAM_PREFETCH = {"queued.min.messages": 20000, "queued.max.messages.kbytes": 16384,
                   "max.partition.fetch.bytes": 4 * 1024 * 1024}

#: asynchronous acks are committed within this many seconds (coalesced: at most one request per interval)
ASYNC_COMMIT_INTERVAL_S = 0.1

log = logging.getLogger(__name__)


def commit_offset(bootstrap: str, topic: str, group: str, offset: int, security: dict | None = None) -> None:
    """Make `offset` the committed offset of `group` on `topic` (a resumed trainer restores the offsets
    its checkpoint holds); an older offset than the committed one is left alone."""
    reader = PartitionReader(bootstrap, topic, group, security)
    try:
        reader.commit(offset)
    finally:
        reader.close()


class PartitionReader:
    """A manually assigned single-partition consumer with a local queue of fetched messages.

    The queue holds the lists of messages `consume()` returned, as they came: no per-message Python
    objects are made between the consumer and the batch, so the hot path stays at the speed of a raw
    poll loop.
    """

    def __init__(self, bootstrap: str, topic: str, group: str, security: dict | None = None,
                 overrides: dict | None = None, broker_timeout_s: float = BROKER_TIMEOUT_S,
                 outage: Outage | None = None, partition: int = 0,
                 keep: Callable[[bytes | None], bool] | None = None, share: float = 1.0,
                 start: str | int = "earliest") -> None:
        self.topic, self.bootstrap, self.partition = topic, bootstrap, partition
        self.tp = TopicPartition(topic, partition)
        # a shared partition (kafka/layout.py, partitioned): only the messages whose key `keep` accepts are
        # queued; the others are skipped as they are fetched. `_own`/`_seen` estimate the own share of offsets
        self.keep = keep
        self._own, self._seen, self._share = 0, 0, share
        self.calls = BrokerCalls(bootstrap, broker_timeout_s, outage=outage, refresh=self._refresh)
        self._security, self._wedge = security, Wedge(bootstrap, security)
        self.outage = self.calls.outage
        self._down_since: float | None = None  # set by librdkafka's "all brokers down", cleared by answers
        self._reported = False                 # _down_since is a wait of the outage
        self._probe = Probe(self._refresh)  # "does Kafka answer again?" (a wedged consumer is replaced)
        # the partition's leader went away: a wait for a new one (a replicated topic on a cluster)
        self.leader = LeaderWatch(self.outage, lambda t, timeout: self.consumer.list_topics(t, timeout=timeout),
                                  partition, security)
        conf = consumer_config(bootstrap, group, security, **{**STREAM_PREFETCH, **(overrides or {})})
        conf.setdefault("error_cb", self._on_error)
        self._conf, self._group = conf, group
        self.consumer = Consumer(conf)
        self._lookup: Consumer | None = None  # lookups by time (`_lookups`)
        self.reopened = 0                   # times a wedged consumer was replaced (_refresh)
        self._lock = threading.Lock()       # the commit state, shared with the async-commit timer
        self._timer: threading.Timer | None = None
        try:
            committed = self.calls(lambda t: self._committed(t), f"reading the committed offset of {group} on {topic}")
            low, high = self.calls(lambda t: self.consumer.get_watermark_offsets(self.tp, timeout=t),
                                   f"reading the offsets of {topic}")
        except BaseException:
            self.consumer.close()
            raise
        if committed == OFFSET_INVALID or committed < 0:  # a new group: where `start` says (external streams)
            committed = low if start == "earliest" else high if start == "latest" else None
            if committed is None:
                try:
                    committed = self.calls(lambda t: self._offset_at(int(start), t),
                                           f"looking up offsets by time on {topic}")
                except BaseException:
                    self.consumer.close()
                    raise
                committed = high if committed < 0 else max(low, committed)
        self._high_seen, self._high_at = high, time.monotonic()  # until a fetch response brings the live one
        self.next_offset = committed        # oldest sample not yet handed out
        self.consumer.assign([TopicPartition(topic, partition, committed)])
        self._chunks: deque[list[Message]] = deque()  # fetched, not yet taken; offsets increase
        self._head = 0                      # first untaken index in _chunks[0]
        self.queued = 0                     # messages in the queue
        self._tail = committed              # offset after the last queued message
        self.committed = committed          # newest acknowledged offset
        self._sent, self._sent_at, self._async = committed, 0.0, False  # newest offset sent to the broker

    def _refresh(self, timeout: float):
        """BrokerCalls' retry step: fresh metadata for this reader. After a long outage librdkafka's consumer
        can stay wedged (its metadata requests wait for a usable broker that never comes, although the broker
        is back and a new client gets answers): when its own request fails and it counts as wedged
        (outage_calls.Wedge: REOPEN_AFTER_S of outage, a new client gets an answer), the consumer is replaced
        by a new one
        assigned where this one would fetch next (the local queue and the commit state are kept)."""
        try:
            return self.consumer.list_topics(self.topic, timeout=timeout)
        except KafkaException:
            if not hasattr(self, "_sent") or not self._wedge.wedged(self.outage):  # (not while __init__ reads offsets)
                raise
        log.warning("%s: reopening the consumer at offset %d: it got no answer from Kafka while a new client did",
                    self.topic, self._tail)
        with self._lock:
            old, self.consumer = self.consumer, Consumer(self._conf)
            self.consumer.assign([TopicPartition(self.topic, self.partition, self._tail)])
            self._sent = min(self._sent, self.committed - 1)  # an async commit of the old one may be lost: resend
        self.reopened += 1
        self._drop_lookups()  # as wedged as the consumer, likely: made again on its next use
        with contextlib.suppress(KafkaException, RuntimeError):
            old.close()
        return self.consumer.list_topics(self.topic, timeout=timeout)

    def _offset_at(self, ts_ms: int, timeout: float) -> int:
        res = self.consumer.offsets_for_times([TopicPartition(self.topic, self.partition, ts_ms)], timeout=timeout)[0]
        if res.error is not None:
            raise KafkaException(res.error)
        return res.offset

    def _committed(self, timeout: float) -> int:
        tp = self.consumer.committed([TopicPartition(self.topic, self.partition)], timeout=timeout)[0]
        if tp.error is not None:
            raise KafkaException(tp.error)
        return tp.offset

    def _on_error(self, err: KafkaError) -> None:
        """librdkafka's error callback (served by consume/poll): remember when every broker went down."""
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            if self._down_since is None:
                self._down_since = time.monotonic()
        self.leader.on_error(err)
        log.debug("%s: %s", self.topic, err)

    def check_broker(self) -> None:
        """While every broker is down (librdkafka's error callback said so): a wait of the process's outage
        (KafkaUnavailable once its budget is spent), asking the cluster every few seconds whether it
        answers again (`Probe.tick`); the wait ends with the first answer, here or in another client.
        The callback's news may be old (it is served by this reader's next consume: a trainer that waited
        in a collective meanwhile hears of an outage that is over), so the cluster is asked first. One broker
        of a cluster gone: whether it led this partition (a wait for a new leader: LeaderWatch)."""
        self.leader.check(self.topic)
        if self._down_since is None:
            return
        if self._reported and not self.outage.waiting:  # another client of the process saw Kafka answer
            self._down_since, self._reported = None, False
            return
        if not self._reported and answers(self._probe.probe):
            self._down_since = None
            self.outage.up()
            return
        what = f"reading {self.topic}"
        self.outage.down(what, since=self._down_since)
        self._reported = True
        self._probe.tick(self.outage, what)
        if not self.outage.waiting:
            self._down_since, self._reported = None, False

    def fill(self, timeout: float, max_messages: int = 5000) -> int:
        """Fetch what is available (waiting up to `timeout` for `max_messages`); return how many arrived. On a
        shared partition `max_messages` counts own messages: that many over the own share are asked for."""
        if self.keep is not None:
            share = self._own / self._seen if self._seen >= 100 and self._own else self._share
            max_messages = min(100_000, max(1, round(max_messages / share)))
        msgs = self.consumer.consume(max_messages, timeout=timeout)
        if not msgs:
            return 0
        if any(map(Message.error, msgs)):  # rare: keep the data; librdkafka retries transient errors itself
            for m in msgs:
                err = m.error()
                if err is not None and (err.code() in FATAL or err.fatal()):
                    raise RuntimeError(f"consumer error on {self.topic} at {self.bootstrap}: {err.str()}")
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    log.debug("%s: %s (retried by the client)", self.topic, err)
            msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                return 0
        if self._down_since is not None or self.outage.waiting:  # messages came: a broker answers
            self._down_since, self._reported = None, False
            self.outage.up()
        if self.leader.lost is not None:
            self.leader.answered()
        if msgs and msgs[0].offset() < self._tail:  # behind a truncation seek
            msgs = [m for m in msgs if m.offset() >= self._tail]
        if not msgs:
            return 0
        self._tail = msgs[-1].offset() + 1
        if self.keep is not None:  # a shared partition: skip the other devices' messages
            seen, keep = len(msgs), self.keep
            msgs = [m for m in msgs if keep(m.key())]
            self._seen += seen
            self._own += len(msgs)
            if not msgs:
                return 0
        self._chunks.append(msgs)
        self.queued += len(msgs)
        return len(msgs)

    def own(self, offsets: int) -> int:
        """How many of `offsets` messages not fetched yet are this reader's: all of them on a partition of its
        own; on a shared one, estimated from the share of own messages fetched so far."""
        if self.keep is None or offsets <= 0:
            return max(0, offsets)
        share = self._own / self._seen if self._seen >= 100 else self._share
        return round(offsets * share)

    def available(self, high: int) -> int:
        """Own messages unread up to end offset `high`: the queued ones plus `own` of those not fetched yet."""
        if self.keep is None:
            return max(0, high - self.next_offset)
        return self.queued + self.own(high - self._tail)

    def drop(self, n: int) -> int:
        """Skip the `n` oldest own messages (a shared partition's truncation), fetching what is there; return
        how many were skipped."""
        while self.queued < n and self.fill(0.05, max_messages=5000):
            pass
        return len(self.take(min(n, self.queued)))

    def high_watermark(self) -> int:
        """The partition's end offset as of the last fetch response; before the first one, the value
        read at start (or, when that is older than HIGH_WATERMARK_MAX_AGE_S, asked of the broker)."""
        _, high = self.consumer.get_watermark_offsets(self.tp, cached=True)
        if high is None or high < 0:
            if time.monotonic() - self._high_at <= HIGH_WATERMARK_MAX_AGE_S:
                return max(self._high_seen, self._tail)
            _, high = self.calls(lambda t: self.consumer.get_watermark_offsets(self.tp, timeout=t),
                                 f"reading the end offset of {self.topic}")
        self._high_seen, self._high_at = high, time.monotonic()
        return max(high, self._tail)

    def lag(self) -> int:
        return self.available(self.high_watermark())

    def _lookups(self) -> Consumer:
        """A client of its own for lookups by time (made on first use). On the reader's connection a lookup
        waits behind the fetch the broker holds open while the stream is caught up (fetch.wait.max.ms: the
        broker answers a connection's requests in order): a rate batch's window lookup took ~480 ms a batch."""
        if self._lookup is None:
            self._lookup = Consumer(consumer_config(self.bootstrap, self._group, self._security))
        return self._lookup

    def warm_lookups(self, timeout: float = 5.0) -> None:
        """Make the lookup client and let it learn the partition's leader (best effort: a lookup asks again)."""
        with contextlib.suppress(KafkaException, RuntimeError):
            self._lookups().list_topics(self.topic, timeout=timeout)

    def _drop_lookups(self) -> None:
        old, self._lookup = self._lookup, None
        if old is not None:
            with contextlib.suppress(KafkaException, RuntimeError):
                old.close()

    def offset_for_time(self, ts_ms: int) -> int:
        """The first offset whose timestamp is >= ts_ms (the high watermark when none is)."""
        def ask(timeout: float) -> TopicPartition:
            tp = TopicPartition(self.topic, self.partition, ts_ms)
            res = self._lookups().offsets_for_times([tp], timeout=timeout)[0]
            if res.error is not None:
                raise KafkaException(res.error)
            return res

        res = self.calls(ask, f"looking up offsets by time on {self.topic}")
        return res.offset if res.offset >= 0 else self.high_watermark()

    def first_at_or_after(self, ts_ms: int) -> int | None:
        """The offset of the first queued message whose timestamp is >= ts_ms, None when none queued is
        (a scan: a message with an odd timestamp, e.g. written by someone else, cannot make it skip more)."""
        for i, chunk in enumerate(self._chunks):
            for m in islice(chunk, self._head if i == 0 else 0, None):
                if m.timestamp()[1] >= ts_ms:
                    return m.offset()
        return None

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
            self.consumer.seek(TopicPartition(self.topic, self.partition, offset))
            self._tail = offset
        self.next_offset = offset
        return skipped

    def seek(self, offset: int) -> None:
        """Continue reading at `offset` (forward or back): drop everything queued, move the fetch
        position, and make `offset` the group's committed offset, also when that moves it back (a
        restored `state_dict` wins over what the group had committed)."""
        offset = int(offset)
        if offset < 0:
            raise ValueError(f"offset: {offset} is not allowed; must be >= 0")
        self._chunks.clear()
        self._head = self.queued = 0
        # a new assignment restarts the fetcher there; messages fetched for the old position are discarded
        self.consumer.assign([TopicPartition(self.topic, self.partition, offset)])
        self.next_offset = self._tail = offset
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self.committed = offset
        tp = [TopicPartition(self.topic, self.partition, offset)]
        self.calls(lambda t: self.consumer.commit(offsets=tp, asynchronous=False),
                   f"committing offset {offset} on {self.topic}")
        with self._lock:
            self._sent, self._async = offset, False

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

    def untake(self, messages: list[Message]) -> None:
        """Put back `messages`, the newest ones `take` returned (oldest first), none of them handed out: the
        queue and the read position are as before they were taken (a consumer that read ahead of its
        batches and then needs them otherwise: KafkaStreamDataset's block of batches)."""
        if not messages:
            return
        chunks = self._chunks
        if self._head:
            chunks[0] = chunks[0][self._head:]
            self._head = 0
        chunks.appendleft(messages)
        self.queued += len(messages)
        self.next_offset = messages[0].offset()

    def take_all(self) -> list[Message]:
        return self.take(self.queued)

    def commit(self, offset: int, wait: bool = True) -> None:
        """Commit `offset` (the next one to read).

        wait=True: durable before it returns. wait=False: asynchronous and coalesced -- the newest
        acknowledged offset is sent within ASYNC_COMMIT_INTERVAL_S (at most one request per interval;
        a timer sends it while the trainer is busy elsewhere); still at-least-once: a crash re-delivers
        what the broker had not recorded, never loses.
        """
        with self._lock:
            if offset <= self.committed:
                return
            self.committed = offset
            if not wait and self._timer is not None:  # the pending timer sends it (a batch's ack: one lock)
                return
        if wait:
            tp = [TopicPartition(self.topic, self.partition, offset)]
            self.calls(lambda t: self.consumer.commit(offsets=tp, asynchronous=False),
                       f"committing offset {offset} on {self.topic}")
            with self._lock:
                self._sent = max(self._sent, offset)
        else:
            self.flush_commits()

    def flush_commits(self) -> None:
        """Send the newest acknowledged offset asynchronously if it is not sent yet: now when the last
        asynchronous commit is ASYNC_COMMIT_INTERVAL_S old, else from a timer at that moment."""
        with self._lock:
            if self.committed <= self._sent:
                return
            wait = self._sent_at + ASYNC_COMMIT_INTERVAL_S - time.monotonic()
            if wait > 0:
                if self._timer is None:
                    self._timer = threading.Timer(wait, self._on_timer)
                    self._timer.daemon = True
                    self._timer.start()
                return
            self.consumer.commit(offsets=[TopicPartition(self.topic, self.partition, self.committed)],
                                 asynchronous=True)
            self._sent, self._sent_at, self._async = self.committed, time.monotonic(), True

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
            if self._closed:
                return
        try:
            self.flush_commits()
        except (KafkaException, RuntimeError) as exc:  # the next ack or close sends it again
            log.warning("async commit on %s failed: %s", self.topic, exc)

    _closed = False

    def close(self, wait: bool = True) -> None:
        """Make the last acknowledged offset durable (through an outage, within its budget), then close the
        consumer. wait=False (a process ending anyway): one try, none while Kafka is known to be silent
        (a commit without a coordinator blocks for seconds); KafkaUnavailable when it is not made."""
        self.calls.patient = self.calls.patient and wait
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        try:
            if self._async or self.committed > self._sent:  # make the last acknowledged offset durable
                silent = self.outage.waiting or self.outage.hurried or self._down_since is not None
                if not self.calls.patient and silent:
                    raise KafkaUnavailable(f"offset {self.committed} on {self.topic} not committed: Kafka at "
                                           f"{self.bootstrap} is silent and the process is ending")
                tp = [TopicPartition(self.topic, self.partition, self.committed)]
                self.calls(lambda t: self.consumer.commit(offsets=tp, asynchronous=False),
                           f"committing offset {self.committed} on {self.topic}")
        finally:
            self._drop_lookups()
            self.consumer.close()
