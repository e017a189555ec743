"""Blocks of batches: a trainer behind its stream takes the whole batches the broker already holds at
once, decodes them in one pass (on a device: one copy, one kernel) and hands them out one at a time as
views of the block (docs/streaming.md "Blocks of batches"). `BlockTakes` is that part of
`edgestream.consumers.dataset.KafkaStreamDataset` (which says when blocks are taken: `_block_rows`); a
batch decoded ahead is committed only once handed out and acknowledged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from edgestream.consumers.batch import StreamBatch
from edgestream.consumers.kafka_stream import RawBatch
from edgestream.data.serde import DecodedBatch

#: how long a block waits for the next fetch of samples the broker already holds (`_take_block`)
BLOCK_WAIT_S = 0.05


@dataclass
class _Block:
    """Batches decoded ahead in one pass (`KafkaStreamDataset._take_block`): `parts` the batches (views of
    one decoded block), `handed` how many were handed out, `raw` the block's take."""

    parts: list[DecodedBatch]
    size: int
    raw: RawBatch
    lag: int          # own samples unread after the block (its batches not handed out count on top)
    labels: tuple     # each batch's targets as a tensor: views of the block's (one from_numpy, one split)
    handed: int = 0


class BlockTakes:
    """The block path of `KafkaStreamDataset` (a mixin: it reads the dataset's stream, serde and state; `self` is
    typed Any, not the dataset, so this module imports nothing of the dataset's)."""

    def _take_block(self: Any, timeout: float | None) -> _Block | None:
        """Several batches at once, when the stream already holds them (a trainer behind its stream: one
        fetch brings thousands of samples): the whole batches in Kafka (up to `_block_rows`) are taken in one
        take, validated and decoded in one C pass into one (pinned, for a GPU) buffer, moved and normalised
        on the device in one copy and one kernel, and handed out one batch at a time as views of the block
        (`_hand_out`), each with its own offsets: a batch is acknowledged -- committed -- only once handed
        out. None when fewer than two batches are there (a slow stream: the one-batch path). A rejected
        message ends the block before its batch: the one-batch path takes that batch (the DLQ, the
        replacements), and blocks go on after the message."""
        rows = self._block_rows()
        reader = self.stream.reader
        if not rows or reader.next_offset < self._no_block_before:
            return None
        b = self.stream.rule.batch_policy.size
        # the whole batches already in Kafka (the lag, from the last fetch response: exact on a partition of
        # its own; on a shared one only what is queued counts) are fetched: librdkafka reads ahead in its
        # thread, so waiting for samples that are there delays no batch. A fetch that brings nothing in
        # BLOCK_WAIT_S (offsets without a message, a broker gone) ends the wait: the block is what came
        want = rows if reader.keep is not None else min(rows, reader.available(reader.high_watermark()) // b * b)
        if reader.queued < want:
            t0 = time.monotonic()
            while reader.queued < want and reader.fill(0.0 if reader.keep is not None else BLOCK_WAIT_S,
                                                       max_messages=want - reader.queued):
                if timeout is not None and time.monotonic() - t0 > timeout:
                    break
        n = min(rows, reader.queued // b * b)
        if n < 2 * b:
            return None
        raw = self.stream.take_raw(timeout=timeout, size=n)
        if raw is None:
            return None
        messages = raw.messages
        out, bad = self.serde.decode(messages, self._own_rule, self._decode_on)
        # a rejected message: the whole batches before it are the block; the rest goes back, and the batch
        # with the message is taken by the one-batch path (the DLQ, the replacements), blocks again after it
        keep = 0 if out is None else bad[0][0] // b * b if bad else n
        if keep < n:
            self.stream.untake(messages[keep:])
            if bad:
                self._no_block_before = messages[bad[0][0]].offset() + 1
            if not keep:
                return None
        parts, y = out.split(b), out.labels
        labels = torch.from_numpy(y if y.dtype in (np.int64, np.float32) else y.astype(np.int64)).split(b)
        whole = keep // b
        block = self._block = _Block(parts[:whole], b, raw, raw.buffer_samples + n - keep, labels[:whole])
        return block

    def _hand_out(self: Any, block: _Block) -> StreamBatch:
        """The next batch of `block` (views of its decoded samples). Its lag counts the block's batches not
        handed out yet as unread; the block's wait and skipped samples go with its first batch."""
        i = block.handed
        block.handed = i + 1
        self.block_batches += 1
        part = block.parts[i]
        ahead = (len(block.parts) - i - 1) * block.size
        if not ahead:
            self._block = None
        raw = block.raw
        last = part.accepted[-1]
        lag, lag_bytes, lag_s = self.stream.backlog_behind(block.lag + ahead, last)
        first = i == 0
        return self._finish([part], raw, raw.wait_s if first else 0.0, raw.dropped if first else 0, 0,
                            last.offset() + 1, lag, lag_bytes, lag_s, target=block.size, labels=block.labels[i])

    def _give_back(self: Any) -> None:
        """Return the batches of the block not handed out to the stream (`KafkaDeviceStream.untake`)."""
        block, self._block = self._block, None
        if block is not None and block.handed < len(block.parts):
            self.stream.untake([m for p in block.parts[block.handed:] for m in p.accepted])
