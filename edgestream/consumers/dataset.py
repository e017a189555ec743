"""PyTorch integration: a device's Kafka stream as a `torch.utils.data.IterableDataset` of batches.

Every message is validated against the run's dataset by the run's `SampleSerde` (spec: dtype, shape,
target: class range or float dtype and shape; the device id must be the topic's device): anything
else goes to the run's DLQ with a reason and its original key, and is skipped -- and replaced by the
next genuine sample, so a batch holds the policy's b_i whatever is rejected (`next_batch`). No
per-message failure reaches the trainer.

Each item is a `StreamBatch` (edgestream.consumers.batch): x float32 (uint8 samples normalised on the
consumer side: on the host in the decoding pass, or -- `torch_device` a GPU -- on that device, where
the batch arrives as uint8 and is converted and normalised: the same values), labels (the targets:
int64 class indices, or float32 regression targets (n,) / (n, K), as the run's `SampleSpec` says), each
row's device, sequence number and produce time, and what the stream did (wait, the lag left in samples
and seconds of data, dropped/injected/DLQ counts, a lag warning) plus what `ack(batch)` needs to commit
its offsets. Offsets are
committed only on ack, so a crash re-delivers every unacknowledged sample (at-least-once).
`commit="sync"` (default) makes each ack durable before it returns, so a restart re-delivers exactly
the unacknowledged samples; `commit="async"` is faster and may also re-deliver the last acknowledged
batches after a crash (duplicates, never losses).

A trainer behind its stream gets its batches from blocks: the whole batches the broker already holds
are taken, decoded (and on a device moved and normalised) at once and handed out one at a time as views
of the block (`_take_block`, docs/streaming.md "Blocks of batches"); a batch decoded ahead is committed
only once handed out and acknowledged.

`state_dict()` / `load_state_dict(state)` (torchdata's StatefulDataLoader convention) hold how far the
streams were CONSUMED (handed out in batches, acknowledged or not), the step counter and the totals:
a checkpoint that holds a model trained on a batch also holds a stream position after that batch.

Use it with `make_dataloader` (batch_size=None, num_workers=0: the consumer and its commits live in
the trainer process).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from edgestream.consumers.batch import StreamBatch
from edgestream.consumers.blocks import BLOCK_WAIT_S, BlockTakes, _Block  # noqa: F401 - BLOCK_WAIT_S re-exported
from edgestream.consumers.broker_calls import BROKER_TIMEOUT_S
from edgestream.consumers.dlq import DeadLetters
from edgestream.consumers.injection import InjectionChannel
from edgestream.consumers.kafka_stream import KafkaDeviceStream, RawBatch
from edgestream.data.serde import DecodedBatch, SampleSerde
from edgestream.data.validate import DeviceRule, SampleSpec
from edgestream.data.wire import Affine
from edgestream.kafka.layout import StreamLayout
from edgestream.kafka.outage import Outage
from edgestream.streams import build_batch_policy, build_buffer_policy
from edgestream.streams.lag import LagWatch
from edgestream.streams.policies import FixedBatch, PersistBuffer

#: version of `KafkaStreamDataset.state_dict()`
STATE_VERSION = 1

#: a block of batches (`KafkaStreamDataset._take_block`): at most this many batches, and at most this many
#: bytes of decoded samples (the host buffer: uint8 for a GPU, float32 on the host), per block
BLOCK_BATCHES = 32
BLOCK_BYTES = 4 * 1024 * 1024


log = logging.getLogger(__name__)


class KafkaStreamDataset(BlockTakes, IterableDataset):
    """Batches of device `device` of run `run`; see the module docstring.

    The samples are described by `spec` and normalised by `normalize` (an `Affine`, default x / 255,
    applied while decoding; any other callable gets the decoded raw batch and returns a float tensor),
    or by a ready `serde` (then `spec` and `normalize` are taken from it).

    `torch_device`: where `x` goes. None or a CPU: the host normalises while it decodes (one pass from
    the message bytes to float32). A GPU (e.g. "cuda"): the host only copies each sample's raw bytes
    (uint8: a quarter of the float32 bytes) into a pinned batch, `.to(device, non_blocking=True)`
    moves it, and the float32 conversion and the normalisation run on the GPU (`SampleSerde.decode`).
    """

    def __init__(self, bootstrap: str, run: str, device: int, *, num_devices: int, spec: SampleSpec | None = None,
                 batch: dict, buffer: str = "persist", injection: dict | None = None, seed: int = 0,
                 normalize: Affine | Callable[[np.ndarray], torch.Tensor] | None = None, window_s: float = 1.0,
                 security: dict | None = None, max_batches: int | None = None, timeout: float | None = None,
                 pin_memory: bool = False, commit: str = "sync", broker_timeout_s: float = BROKER_TIMEOUT_S,
                 serde: SampleSerde | None = None, torch_device: torch.device | str | None = None,
                 outage: Outage | None = None, max_lag_s: float | None = None,
                 lag_warning_s: float | None = 60.0, layout: StreamLayout | None = None,
                 start: str | int = "earliest", holdout: float | None = None) -> None:
        super().__init__()
        if serde is None:
            if spec is None:
                raise ValueError("KafkaStreamDataset needs the run's `spec` (or a `serde`)")
            serde = SampleSerde(spec, normalize if normalize is not None else Affine())
        if commit not in ("sync", "async"):
            raise ValueError(f"commit: {commit!r} is not allowed; must be 'sync' or 'async'")
        self.serde = serde
        self.device, self.num_devices, self.seed = device, num_devices, seed
        self.torch_device = torch.device(torch_device) if torch_device is not None else None
        # where the serde normalises: None = on the host, while decoding (the cheapest when x stays there)
        self._decode_on = self.torch_device if self.torch_device is not None and self.torch_device.type != "cpu" \
            else None
        self.spec, self.normalize = serde.spec, serde.normalize
        self._own_rule = DeviceRule(device, num_devices)
        self._inj_rule = DeviceRule(device, num_devices, injected=True)
        # every client of the dataset waits through one outage (runtime.kafka_outage_s: `broker_timeout_s`)
        self.outage = outage if outage is not None else Outage(bootstrap, broker_timeout_s)
        self.stream = KafkaDeviceStream(bootstrap, run, device, batch_policy=build_batch_policy(batch),
                                        buffer_policy=build_buffer_policy(buffer, window_s=window_s),
                                        window_s=window_s, security=security, outage=self.outage,
                                        max_lag_s=max_lag_s, layout=layout, start=start)
        #: eval.holdout: the share of this device's records held out for evaluation (edgestream.data.holdout)
        self.holdout = holdout
        try:
            # the algorithm decides what to inject (its Inject request -> `inject`); the dataset only opens
            # the channel when the run injects, and mixes what others injected into its next batch
            self.channel = (InjectionChannel(bootstrap, run, device, security, outage=self.outage, layout=layout)
                            if injection else None)
            self.dlq = DeadLetters(bootstrap, run, security, outage=self.outage)
        except BaseException:
            self.stream.close()
            raise
        self.max_batches, self.timeout, self.pin_memory = max_batches, timeout, pin_memory
        self.commit_wait = commit == "sync"
        self.step = 0
        self.totals = {"samples": 0, "dropped": 0, "injected_in": 0, "injected_out": 0, "injected_bytes": 0,
                       "dlq": 0, "held_out": 0}
        self._taking: RawBatch | None = None  # a batch being taken (its rejected samples being replaced)
        self._block: _Block | None = None    # batches decoded ahead, not all handed out yet
        self._no_block_before = 0            # a block held a rejected message: none before this offset
        self.block_batches = 0               # batches handed out of blocks (the rest: the one-batch path)
        # runtime.lag_warning_s: one warning when the lag has kept growing this long (None: never)
        self.lag_watch = LagWatch(lag_warning_s) if lag_warning_s is not None else None
        # how far each stream was consumed: the next offset after the last batch handed out
        self._consumed: dict[str, int | None] = {
            "dev": self.stream.reader.next_offset,
            "inj": self.channel.reader.next_offset if self.channel is not None else None}

    def _decode(self, messages: list, rule: DeviceRule, topic: str) -> tuple[DecodedBatch | None, int]:
        """Validate and decode a batch of Kafka messages with the run's serde; the bad ones go to the DLQ
        with their reason (and key and offset) and are skipped. Returns (the decoded rows or None, #bad)."""
        out, bad = self.serde.decode(messages, rule, self._decode_on)
        for index, reason in bad:
            m = messages[index]
            self.dlq.send(m.value(), reason, source_topic=topic, offset=m.offset(), key=m.key())
        return out, len(bad)

    def _accept(self, taking: RawBatch, messages: list) -> None:
        """Decode own-stream `messages` into the batch being taken (the rejected ones to the DLQ; the held-out
        ones, eval.holdout, are skipped: never trained on, acknowledged with the batch like the rejected)."""
        if self.holdout is not None and messages:
            from edgestream.data.holdout import held_out

            offsets = np.fromiter((m.offset() for m in messages), np.int64, len(messages))
            mask = held_out(self.device, offsets, self.holdout)
            if mask.any():
                self.totals["held_out"] += int(mask.sum())
                messages = [m for m, h in zip(messages, mask.tolist(), strict=True) if not h]
                if not messages:
                    return
        own, bad = self._decode(messages, self._own_rule, self.stream.reader.topic)
        taking.dlq += bad
        if own is not None:
            taking.parts.append(own)
            taking.valid += len(own)

    def _lag_warning(self, lag: int, lag_s: float | None) -> str | None:
        """The warning line (logged, and carried by the batch) when the lag in seconds of data has kept
        growing for runtime.lag_warning_s (`LagWatch`: once per growth episode); else None. Seconds, not
        samples: a bounded lag (max_lag_s) or a producer slowing down is no stream outrunning training."""
        watch = self.lag_watch
        if watch is None or lag_s is None or not watch.update(time.monotonic(), lag_s):
            return None
        line = (f"warning: device {self.device}: the stream outruns training: its lag has kept growing for "
                f"{time.monotonic() - watch.grown_since:.0f} s, to {lag:,} samples, {lag_s:.1f} s of data "
                f"(runtime.lag_warning_s {watch.warn_after_s:g} s); set algorithm.max_lag_s to bound it (older "
                "samples are skipped and counted as dropped), or train faster")
        log.warning("%s", line)
        return line

    def inject(self, batch: StreamBatch, indices: list[int], targets: list[int]) -> tuple[int, int]:
        """Send the rows `indices` of `batch` to each of `targets`' injection topics (their original bytes).
        The algorithm decides which (ScaDLES' `Inject` request); the dataset only performs it. Returns
        (samples sent, bytes sent)."""
        if self.channel is None:
            raise RuntimeError(f"device {self.device}: injection needs algorithm.injection in the config "
                               "(the injection channel is not open)")
        if not indices or not targets:
            return 0, 0
        bad = [t for t in targets if not 0 <= t < self.num_devices or t == self.device]
        if bad:
            raise ValueError(f"device {self.device} cannot inject into devices {bad}")
        messages = batch.messages
        nbytes = self.channel.send([messages[i].value() for i in indices], targets)
        sent = len(indices) * len(targets)
        self.totals["injected_out"] += sent
        self.totals["injected_bytes"] += nbytes
        return sent, nbytes

    def next_batch(self, size: int | None = None) -> StreamBatch | None:
        """One batch, or None when `timeout` passed without the policy's samples arriving. `size`
        overrides the batch policy's b_i (an algorithm's explicit TakeBatch size).

        Own samples rejected by validation (to the DLQ, with their reasons) are replaced by the next
        valid ones (`TakeDecision.refill`): a fixed, rate or explicit size waits for them as for any slow
        stream, so hostile messages never change a batch's size; `available` tops up from what is buffered
        without waiting (and waits for one valid sample when none was). The rejected messages are counted
        (`dlq`) and acknowledged with the batch (its `next_offset` lies past them). A take that times out
        part-way is continued by the next call. Injected samples (from peers) come on top of the own ones.
        So a batch is empty only when the algorithm asked for zero samples (`size=0`)."""
        block = self._block
        if block is not None:
            if size is None or size == block.size:
                return self._hand_out(block)
            self._give_back()  # another size: the batches decoded ahead go back to the stream, untouched
        deadline = None if self.timeout is None else time.monotonic() + self.timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        taking = self._taking
        if taking is None and size is None:
            block = self._take_block(left())
            if block is not None:
                return self._hand_out(block)
        if taking is None:
            raw = self.stream.take_raw(timeout=left(), size=size)
            if raw is None:
                return None
            taking = self._taking = raw
            self._accept(taking, raw.messages)
        while True:
            more, need = taking.decision.refill(taking.valid)
            if more == 0:
                break
            t0 = time.monotonic()
            messages = self.stream.top_up(more, need, timeout=left())
            taking.wait_s += time.monotonic() - t0
            if messages is None:
                return None  # the next call goes on with this batch
            taking.topped_up = True
            valid = taking.valid
            if messages:
                self._accept(taking, messages)
            if need == 0 and taking.valid == valid:  # `available`: what is buffered brought nothing valid
                break
        self._taking = None
        raw = taking
        # what is left unread: the consumer lag (after the top-ups: read again), past the rejected messages
        lag, lag_bytes, lag_s = (self.stream.backlog() if taking.topped_up
                                 else (raw.buffer_samples, raw.buffer_bytes, raw.lag_s))
        return self._finish(taking.parts, raw, taking.wait_s, raw.dropped, taking.dlq,
                            self.stream.reader.next_offset, lag, lag_bytes, lag_s)

    def _block_rows(self) -> int:
        """How many samples a block of batches may hold (`_take_block`; 0: no block). Blocks are taken only
        where the take sequence decides the same for every batch -- a fixed batch size, a persist buffer, no
        lag bound -- for samples of the wire format that the serde decodes into a reused buffer (a
        `SampleSerde` with an Affine or no normalisation; a record decoder of another format, or a callable
        normalisation, sees its batches one at a time as before), without held-out samples."""
        rule = self.stream.rule
        policy, serde = rule.batch_policy, self.serde
        if (not isinstance(policy, FixedBatch) or not isinstance(rule.buffer_policy, PersistBuffer)
                or rule.max_lag_s is not None or self.holdout is not None or type(serde) is not SampleSerde
                or serde._transform is not None):
            return 0
        spec, b = self.spec, policy.size
        itemsize = 4 if self._decode_on is None and self.normalize is not None else np.dtype(spec.dtype).itemsize
        k = min(BLOCK_BATCHES, BLOCK_BYTES // max(1, b * math.prod(spec.shape) * itemsize))
        return k * b if k >= 2 and b > 0 else 0

    def _finish(self, own: list[DecodedBatch], raw: RawBatch, wait_s: float, dropped: int, dlq: int,
                next_offset: int, lag: int, lag_bytes: int, lag_s: float | None,
                target: int | None = None, labels: torch.Tensor | None = None) -> StreamBatch:
        """The batch handed out: the own decoded rows `own`, the samples peers injected since the last batch
        on top; `next_offset` acknowledges it. `labels`: the own rows' targets as a tensor already (a block's
        view), used when no injected rows join them."""
        channel = self.channel
        inj, inj_next, bad_inj = None, None, 0
        if channel is not None:
            injected, inj_next = channel.receive()
            if injected:
                inj, bad_inj = self._decode(injected, self._inj_rule, channel.reader.topic)
        parts = own + [inj] if inj is not None else own
        if len(parts) == 1:
            p = parts[0]
            x, y, src, seq, pt, messages = p.x, p.labels, p.devices, p.seqs, p.produce_times, p.accepted
            xt = torch.from_numpy(x) if isinstance(x, np.ndarray) else x
        elif parts:
            xt = torch.cat([torch.from_numpy(p.x) if isinstance(p.x, np.ndarray) else p.x for p in parts])
            y, src, seq, pt = (np.concatenate([getattr(p, f) for p in parts])
                               for f in ("labels", "devices", "seqs", "produce_times"))
            messages = [m for p in parts for m in p.accepted]
        else:
            xt = torch.zeros((0, *self.spec.shape), device=self.torch_device)
            y, src = self.spec.empty_targets(), np.zeros(0, dtype=np.int64)
            seq, pt, messages = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64), []
        # (x is on the torch_device already: the serde decoded it there, or on the host for a CPU one)
        # targets: int64 class indices, or float32 float targets (n,) / (n, K), as the serde decoded them
        yt = (labels if labels is not None and inj is None
              else torch.from_numpy(y if y.dtype in (np.int64, np.float32) else y.astype(np.int64)))
        if self.pin_memory and torch.cuda.is_available():
            xt, yt = (xt.pin_memory() if xt.device.type == "cpu" else xt), yt.pin_memory()
        n_inj = 0 if inj is None else len(inj)
        batch = StreamBatch(
            x=xt, labels=yt, devices=src if src.dtype == np.int64 else src.astype(np.int64),
            # seqs: uint64 on the wire, int64 here (the same bits below 2**63: a view, not a copy)
            seqs=seq.view(np.int64) if seq.dtype == np.uint64 else np.asarray(seq, dtype=np.int64),
            produce_times=pt if pt.dtype == np.float64 else pt.astype(np.float64), device=self.device, step=self.step,
            target=raw.target if target is None else target, wait_s=wait_s, rate=raw.rate, dropped=dropped,
            injected=n_inj, dlq=dlq + bad_inj, buffer_samples=lag, buffer_bytes=lag_bytes, lag_s=lag_s,
            next_offset=next_offset, inj_next_offset=inj_next, messages=messages,
            lag_warning=self._lag_warning(lag, lag_s))
        self._consumed = {"dev": next_offset, "inj": inj_next if inj_next is not None else self._consumed["inj"]}
        self.step += 1
        t = self.totals
        t["samples"] += batch.n
        t["dropped"] += batch.dropped
        t["injected_in"] += n_inj
        t["dlq"] += batch.dlq
        return batch

    def __iter__(self) -> Iterator[StreamBatch]:
        while self.max_batches is None or self.step < self.max_batches:
            batch = self.next_batch()
            if batch is None:
                return
            yield batch

    def ack(self, batch: StreamBatch) -> None:
        """Commit the offsets of `batch` (and everything before it)."""
        self.stream.ack(int(batch.next_offset), self.commit_wait)
        if self.channel is not None and batch.inj_next_offset is not None:
            self.channel.ack(int(batch.inj_next_offset))

    # ------------------------------------------------------------------ state (StatefulDataLoader convention)
    def state_dict(self) -> dict[str, Any]:
        """How far this device's streams were consumed (the next offset after the last batch handed out,
        acknowledged or not, of the device topic "dev" and the injection topic "inj" -- None without
        injection), the step counter and the totals: plain ints, safe for torch.load(weights_only=True)."""
        return {"version": STATE_VERSION, "device": self.device, "step": self.step,
                "offsets": {"dev": int(self._consumed["dev"]),
                            "inj": None if self._consumed["inj"] is None else int(self._consumed["inj"])},
                "totals": {k: int(v) for k, v in self.totals.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue exactly after the positions in `state` (from `state_dict`): the readers seek there
        (anything queued is dropped) and the positions become the consumer groups' committed offsets,
        whatever the groups had committed before (the state wins: acks and restarts then agree)."""
        try:
            version, device = int(state["version"]), int(state["device"])
            offsets, step, totals = state["offsets"], int(state["step"]), state["totals"]
            dev, inj = int(offsets["dev"]), offsets.get("inj")
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a KafkaStreamDataset state: {exc!r}") from None
        if version != STATE_VERSION:
            raise ValueError(f"stream state version {version}; this edgestream reads version {STATE_VERSION}")
        if device != self.device:
            raise ValueError(f"the stream state is device {device}'s; this dataset is device {self.device}'s")
        self._taking = self._block = None  # a batch being taken, or decoded ahead, is dropped with the queue
        self._no_block_before = 0
        self.stream.seek(dev)
        if self.channel is not None and inj is not None:
            self.channel.reader.seek(int(inj))
        self._consumed = {"dev": dev, "inj": int(inj) if self.channel is not None and inj is not None
                          else (self.channel.reader.next_offset if self.channel is not None else None)}
        self.step = step
        self.totals.update({k: int(v) for k, v in totals.items()})
        self.stream.dropped_total = self.totals["dropped"]

    def hurry(self) -> None:
        """Wait for Kafka no more (a process ending in failure): a commit that gets no answer raises
        KafkaUnavailable at once instead of waiting out the outage budget."""
        for reader in (self.stream.reader, self.channel.reader if self.channel is not None else None):
            if reader is not None:
                reader.calls.patient = False

    def close(self, wait: bool = True) -> None:
        """Flush the DLQ and the injected samples, make the last acknowledged offsets durable, close the
        consumers. Through an outage it waits while the budget lasts (KafkaUnavailable after closing the
        rest). wait=False (a process ending in failure): whatever Kafka does not take at once is left
        (logged; a resumed run starts from its checkpoint's positions anyway)."""
        if not wait:
            self.hurry()
        first: Exception | None = None
        parts = [("the DLQ", lambda: self.dlq.flush(wait)),
                 ("the injection channel", (lambda: self.channel.close(wait)) if self.channel else None),
                 ("the device stream", lambda: self.stream.close(wait))]
        for what, close in parts:
            if close is None:
                continue
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - the other parts still close; the first error is raised
                if wait and first is None:
                    first = exc
                log.warning("closing %s of device %d: %s", what, self.device, exc)
        if first is not None:
            raise first


def make_dataloader(dataset: KafkaStreamDataset, pin_memory: bool = False) -> DataLoader:
    """A DataLoader over the stream's `StreamBatch`es (batch_size=None: the stream already batches;
    num_workers=0 so the Kafka consumer and its commits stay in the trainer process)."""
    dataset.pin_memory = pin_memory
    return DataLoader(dataset, batch_size=None, num_workers=0)
