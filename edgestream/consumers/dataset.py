"""PyTorch integration: a device's Kafka stream as a `torch.utils.data.IterableDataset` of batches.

Every message is validated against the run's dataset (`spec`: dtype, shape, label range; the device
id must be the topic's device): anything else goes to the run's DLQ with a reason and its original key,
and is skipped (edgestream.data.validate). No per-message failure reaches the trainer.

Each item is `(x, y, meta)`: x float32 (uint8 samples normalised here, on the consumer side), y int64,
and meta with the batch size, wait time, buffer size, dropped/injected/DLQ counts and what `ack(meta)`
needs to commit the batch's offsets. Offsets are committed only on ack, so a crash re-delivers every
unacknowledged sample (at-least-once). `commit="sync"` (default) makes each ack durable before it
returns, so a restart re-delivers exactly the unacknowledged samples; `commit="async"` is faster and
may also re-deliver the last acknowledged batches after a crash (duplicates, never losses).

Use it with `make_dataloader` (batch_size=None, num_workers=0: the consumer and its commits live in
the trainer process).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from edgestream.consumers.device_stream import BROKER_TIMEOUT_S, DeviceStream
from edgestream.consumers.dlq import DeadLetters
from edgestream.consumers.injection import InjectionChannel
from edgestream.data.validate import DeviceRule, SampleSpec, decode_checked
from edgestream.data.wire import Affine
from edgestream.streams import build_batch_policy, build_buffer_policy


class KafkaStreamDataset(IterableDataset):
    """Batches of device `device` of run `run`; see the module docstring."""

    def __init__(self, bootstrap: str, run: str, device: int, *, num_devices: int, spec: SampleSpec, batch: dict,
                 buffer: str = "persist", injection: dict | None = None, seed: int = 0,
                 normalize: Affine | Callable[[np.ndarray], torch.Tensor] | None = None, window_s: float = 1.0,
                 security: dict | None = None, max_batches: int | None = None, timeout: float | None = None,
                 pin_memory: bool = False, commit: str = "sync", broker_timeout_s: float = BROKER_TIMEOUT_S) -> None:
        super().__init__()
        self.device, self.num_devices, self.seed, self.spec = device, num_devices, seed, spec
        self._own_rule = DeviceRule(device, num_devices)
        self._inj_rule = DeviceRule(device, num_devices, injected=True)
        self.stream = DeviceStream(bootstrap, run, device, batch_policy=build_batch_policy(batch),
                                   buffer_policy=build_buffer_policy(buffer, window_s=window_s), window_s=window_s,
                                   security=security, broker_timeout_s=broker_timeout_s)
        # the algorithm decides what to inject (its Inject request -> `inject`); the dataset only opens
        # the channel when the run injects, and mixes what others injected into its next batch
        self.channel = (InjectionChannel(bootstrap, run, device, security, broker_timeout_s=broker_timeout_s)
                        if injection else None)
        self.dlq = DeadLetters(bootstrap, run, security)
        # an Affine (default x / 255) is applied while decoding, in one pass over the messages; any other
        # callable gets the decoded (B, *shape) array (a read-only view) and returns a float tensor
        self.normalize = normalize if normalize is not None else Affine()
        if commit not in ("sync", "async"):
            raise ValueError(f"commit: {commit!r} is not allowed; must be 'sync' or 'async'")
        self.max_batches, self.timeout, self.pin_memory = max_batches, timeout, pin_memory
        self.commit_wait = commit == "sync"
        self.step = 0
        self.totals = {"samples": 0, "dropped": 0, "injected_in": 0, "injected_out": 0, "injected_bytes": 0,
                       "dlq": 0}

    @classmethod
    def from_config(cls, cfg, bootstrap: str, run: str, device: int, **kw) -> KafkaStreamDataset:
        """Build from an ExperimentConfig (algorithm.batch/buffer/injection, data normalisation)."""
        from edgestream.data import load_dataset

        ds = load_dataset(cfg.data.dataset, cfg.data.root, seed=cfg.seed,
                          shape=tuple(cfg.data.shape) if cfg.data.shape else None)
        inj = cfg.algorithm.injection.model_dump() if cfg.algorithm.injection else None
        return cls(bootstrap, run, device, num_devices=cfg.devices.count, spec=SampleSpec.of(ds),
                   batch=cfg.algorithm.batch.spec(),
                   buffer=cfg.algorithm.buffer, injection=inj, seed=cfg.seed, normalize=ds.affine,
                   security=cfg.runtime.kafka_client, **kw)

    # ------------------------------------------------------------------ decoding
    def _decode(self, messages: list, rule: DeviceRule, topic: str):
        """Validate and decode a batch of Kafka messages; the bad ones go to the DLQ with their reason
        (and key and offset) and are skipped. Returns ((x tensor, labels, devices, seqs) or None, #bad,
        the accepted messages)."""
        affine = self.normalize if isinstance(self.normalize, Affine) else None
        transform = None if affine is not None else self.normalize
        out, bad = decode_checked(messages, self.spec, rule, affine, transform)
        for index, reason in bad:
            m = messages[index]
            self.dlq.send(m.value(), reason, source_topic=topic, offset=m.offset(), key=m.key())
        if out is None:
            return None, len(bad), []
        accepted = messages
        if bad:
            rejected = {i for i, _ in bad}
            accepted = [m for i, m in enumerate(messages) if i not in rejected]
        x = out[0]
        return ((torch.from_numpy(x) if isinstance(x, np.ndarray) else x), *out[1:]), len(bad), accepted

    def inject(self, meta: dict, indices: list[int], targets: list[int]) -> tuple[int, int]:
        """Send the samples at `indices` of the batch `meta` describes to each of `targets`' injection
        topics (their original bytes). The algorithm decides which (ScaDLES' `Inject` request); the
        dataset only performs it. Returns (samples sent, bytes sent)."""
        if self.channel is None:
            raise RuntimeError(f"device {self.device}: injection needs algorithm.injection in the config "
                               "(the injection channel is not open)")
        if not indices or not targets:
            return 0, 0
        bad = [t for t in targets if not 0 <= t < self.num_devices or t == self.device]
        if bad:
            raise ValueError(f"device {self.device} cannot inject into devices {bad}")
        messages = meta["messages"]
        nbytes = self.channel.send([messages[i].value() for i in indices], targets)
        sent = len(indices) * len(targets)
        self.totals["injected_out"] += sent
        self.totals["injected_bytes"] += nbytes
        return sent, nbytes

    def next_batch(self, size: int | None = None) -> tuple[torch.Tensor, torch.Tensor, dict] | None:
        """One batch, or None when `timeout` passed without the policy's samples arriving. `size`
        overrides the batch policy's b_i (an algorithm's explicit TakeBatch size)."""
        raw = self.stream.take(timeout=self.timeout, size=size)
        if raw is None:
            return None
        own, bad_own, own_msgs = self._decode(raw.messages, self._own_rule, self.stream.reader.topic)
        injected, inj_next = self.channel.receive() if self.channel else ([], None)
        inj, bad_inj, inj_msgs = (self._decode(injected, self._inj_rule, self.channel.reader.topic) if injected
                                  else (None, 0, []))
        parts = [p for p in (own, inj) if p is not None]
        if len(parts) == 1:
            xt, y, src, seq = parts[0]
        elif parts:
            xt = torch.cat([p[0] for p in parts])
            y, src, seq = (np.concatenate([p[i] for p in parts]) for i in (1, 2, 3))
        else:
            xt = torch.zeros(0)
            y = seq = src = np.zeros((0,), dtype=np.int64)
        yt = torch.from_numpy(np.asarray(y, dtype=np.int64))
        if self.pin_memory and torch.cuda.is_available():
            xt, yt = xt.pin_memory(), yt.pin_memory()
        n_inj = 0 if inj is None else len(inj[1])
        meta = {
            "device": self.device, "step": self.step, "batch": len(y), "target": raw.target,
            "wait_s": raw.wait_s, "buffer_samples": raw.buffer_samples, "buffer_bytes": raw.buffer_bytes,
            "dropped": raw.dropped, "injected": n_inj, "dlq": bad_own + bad_inj, "rate": raw.rate,
            "seq": torch.from_numpy(np.asarray(seq, dtype=np.int64)),
            "source": torch.from_numpy(np.asarray(src, dtype=np.int64)),
            "ack": {"dev": raw.next_offset, "inj": inj_next},
            "messages": own_msgs + inj_msgs,  # the accepted samples' Kafka messages, row order of x
        }
        self.step += 1
        t = self.totals
        t["samples"] += meta["batch"]
        t["dropped"] += raw.dropped
        t["injected_in"] += n_inj
        t["dlq"] += meta["dlq"]
        return xt, yt, meta

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, dict]]:
        while self.max_batches is None or self.step < self.max_batches:
            item = self.next_batch()
            if item is None:
                return
            yield item

    def ack(self, meta: dict) -> None:
        """Commit the offsets of the batch `meta` describes (and everything before it)."""
        self.stream.ack(int(meta["ack"]["dev"]), self.commit_wait)
        if self.channel is not None and meta["ack"]["inj"] is not None:
            self.channel.ack(int(meta["ack"]["inj"]))

    def close(self) -> None:
        self.dlq.flush()
        if self.channel is not None:
            self.channel.close()
        self.stream.close()


def make_dataloader(dataset: KafkaStreamDataset, pin_memory: bool = False) -> DataLoader:
    """A DataLoader over the stream's batches (batch_size=None: the stream already batches; num_workers=0
    so the Kafka consumer and its commits stay in the trainer process)."""
    dataset.pin_memory = pin_memory
    return DataLoader(dataset, batch_size=None, num_workers=0)
