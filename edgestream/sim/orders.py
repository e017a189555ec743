"""The devices' per-epoch shard permutations, exactly `ShardOrder`'s, at a fraction of the cost.

`edgestream.data.order.ShardOrder` (shared with the Kafka producers) streams a device's shard epoch
after epoch, each epoch in the order shard[default_rng([seed, device, epoch]).permutation(n)]. With
many devices on a small dataset the shards are tiny (digits on 256 devices: 5-6 samples), so a batch
spans several epochs and building one numpy Generator per epoch (~40-70 us) becomes the simulator's
largest data cost. `EpochOrders` gives the same permutations:

* small shards (n <= `SMALL_SHARD`): numpy's SeedSequence hashing of the key [seed, device, epoch] is
  vectorised over a block of `BLOCK` epochs at once (`seed_words`: the same uint32 arithmetic, the
  hash constants do not depend on the data), then each epoch's PCG64 stream and numpy's Fisher-Yates
  shuffle (bounded draws by masked rejection from 32-bit halves of the 64-bit outputs) run for the
  whole block in one call of the C extension `_shuffle` (`permutations`), or in Python integers
  (`permutation`) where the extension is not built;
* larger shards: numpy itself, with the key as a uint32 array (the same SeedSequence, without the
  list's slow conversion).

`EpochOrders.agrees()` checks the fast paths against `ShardOrder` on a few devices and epochs; the
simulator falls back to `ShardOrder` if they ever differ (a numpy that changed its algorithms), and
tests check many keys.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgestream.data.order import ShardOrder

try:  # optional C extension (setup.py); the Python `permutation` gives the same values
    from edgestream.sim import _shuffle
except ImportError:  # pragma: no cover - depends on the build
    _shuffle = None
if not hasattr(_shuffle, "permutations"):  # built without 128-bit integers
    _shuffle = None

#: shards up to this size use the vectorised seeding and the block shuffle (`permutations`)
SMALL_SHARD = 32
#: epochs seeded per block (per device)
BLOCK = 256
#: stream positions per device computed ahead (whole epochs; at least a batch)
BLOCK_SAMPLES = 256
#: devices whose seed words `EpochOrders.warm` computes in one vectorised call (bounds its temporary memory:
#: 4096 x BLOCK rows of 4 uint64 words, 32 MB)
WARM_DEVICES = 4096

_M32, _M64, _M128 = 2**32 - 1, 2**64 - 1, 2**128 - 1
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R = np.uint32(0xCA01F9DD), np.uint32(0x4973F715)
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645  # PCG64's 128-bit LCG multiplier
_SHIFT = np.uint32(16)


def _constants(init: int, mult: int, count: int) -> list[tuple[np.uint32, np.uint32]]:
    """(h, h * mult) of SeedSequence's hash constant before each of `count` hashmix steps."""
    out, h = [], init
    for _ in range(count):
        nxt = (h * mult) & _M32
        out.append((np.uint32(h), np.uint32(nxt)))
        h = nxt
    return out


_HASH_A = _constants(_INIT_A, _MULT_A, 4 + 12)   # mixing the entropy into the 4-word pool
_HASH_B = _constants(_INIT_B, _MULT_B, 8)        # generate_state(4, uint64): 8 uint32 words


def _hashmix(v: np.ndarray, consts: tuple[np.uint32, np.uint32]) -> np.ndarray:
    v = (v ^ consts[0]) * consts[1]
    return v ^ (v >> _SHIFT)


def seed_words(keys: np.ndarray) -> np.ndarray:
    """SeedSequence(key).generate_state(4, np.uint64) for every row of `keys` ([E, w] uint32, w <= 4),
    as an [E, 4] uint64 array (numpy's algorithm, vectorised over the rows)."""
    keys = np.asarray(keys, dtype=np.uint32)
    rows = keys.shape[0]
    zero = np.zeros(rows, dtype=np.uint32)
    pool = [_hashmix(keys[:, i] if i < keys.shape[1] else zero, _HASH_A[i]) for i in range(4)]
    k = 4
    for src in range(4):
        for dst in range(4):
            if src != dst:
                mixed = _MIX_L * pool[dst] - _MIX_R * _hashmix(pool[src], _HASH_A[k])
                pool[dst] = mixed ^ (mixed >> _SHIFT)
                k += 1
    words = [_hashmix(pool[i % 4], _HASH_B[i]).astype(np.uint64) for i in range(8)]
    return np.stack([words[2 * j] | (words[2 * j + 1] << np.uint64(32)) for j in range(4)], axis=1)


def _mask(i: int) -> int:
    """The smallest 2^k - 1 >= i (numpy's rejection mask for a draw in [0, i])."""
    for shift in (1, 2, 4, 8, 16, 32):
        i |= i >> shift
    return i


_MASKS = [_mask(i) for i in range(SMALL_SHARD + 1)]


def permutation(words: Any, n: int) -> list[int]:
    """default_rng(key).permutation(n) from the key's `seed_words` row (4 ints): PCG64 seeded as numpy
    seeds it, then numpy's shuffle (i from n-1 down to 1, j uniform in [0, i] by masked rejection)."""
    w0, w1, w2, w3 = map(int, words)
    inc = ((((w2 << 64) | w3) << 1) | 1) & _M128
    state = ((inc + ((w0 << 64) | w1)) * _PCG_MULT + inc) & _M128
    arr = list(range(n))
    masks = _MASKS if n <= len(_MASKS) else [_mask(i) for i in range(n)]
    spare: int | None = None  # the upper half of the last 64-bit output, not used yet
    for i in range(n - 1, 0, -1):
        mask = masks[i]
        while True:
            if spare is None:
                state = (state * _PCG_MULT + inc) & _M128
                x = ((state >> 64) ^ state) & _M64
                rot = state >> 122
                out = ((x >> rot) | (x << ((64 - rot) & 63))) & _M64
                value, spare = out & _M32, out >> 32
            else:
                value, spare = spare, None
            value &= mask
            if value <= i:
                break
        arr[i], arr[value] = arr[value], arr[i]
    return arr


def permutations(words: np.ndarray, n: int) -> np.ndarray:
    """[E, n] int64: row e = default_rng(key e).permutation(n), from the keys' `seed_words` rows
    ([E, 4] uint64): the C extension edgestream.sim._shuffle in one call when it is built, else
    `permutation` row by row (the same values)."""
    words = np.ascontiguousarray(words, dtype=np.uint64)
    out = np.empty((len(words), n), dtype=np.int64)
    if _shuffle is not None:
        _shuffle.permutations(words, n, out)
    else:
        for e, row in enumerate(words.tolist()):
            out[e] = permutation(row, n)
    return out


def epoch_permutation(shard: np.ndarray, seed: int, device: int, epoch: int) -> np.ndarray:
    """`shard` in epoch `epoch`'s order, through numpy (ShardOrder's formula; the key as a uint32
    array when it fits, which is the same SeedSequence)."""
    n = len(shard)
    if n == 1:
        return np.asarray(shard)
    key: Any = [seed, device, epoch]
    if all(0 <= v <= _M32 for v in key):
        key = np.array(key, dtype=np.uint32)
    return np.asarray(shard)[np.random.default_rng(key).permutation(n)]


class EpochOrders:
    """Per-epoch dataset-index orders of the devices of `orders` (their `ShardOrder`s).

    `indices(device, start, stop)` is the simulator's hot path: each device keeps one block of its
    stream, whole epochs covering at least `BLOCK_SAMPLES` positions, as ONE read-only int64 array, so
    a batch is a slice of it (a batch that spans several tiny-shard epochs costs no per-epoch work);
    the block is rebuilt further on when a batch runs past its end. The SeedSequence words of the
    small-shard path are computed `BLOCK` epochs at a time per device (numpy's fixed per-call cost
    shared by many epochs) and kept as a compact uint64 array.
    """

    def __init__(self, orders: list[ShardOrder]) -> None:
        self.orders = orders
        self._words: dict[int, tuple[int, np.ndarray]] = {}   # device -> (first epoch, [E, 4] seed words)
        self._blocks: dict[int, tuple[int, np.ndarray]] = {}  # device -> (first position, dataset indices)

    def indices(self, device: int, start: int, stop: int) -> np.ndarray:
        """Dataset indices of own-stream positions [start, stop) of `device` (= ShardOrder.index(k) for
        each k), as a read-only int64 view of the device's block."""
        block = self._blocks.get(device)
        if block is None or not block[0] <= start <= stop <= block[0] + len(block[1]):
            block = self._blocks[device] = self._block(device, start, max(stop, start + BLOCK_SAMPLES))
        first = block[0]
        return block[1][start - first:stop - first]

    def order(self, device: int, epoch: int) -> np.ndarray:
        """Dataset indices of `device`'s shard in epoch `epoch`'s order (= ShardOrder.index)."""
        n = len(self.orders[device].shard)
        return self.indices(device, epoch * n, (epoch + 1) * n)

    def _block(self, device: int, start: int, stop: int) -> tuple[int, np.ndarray]:
        """(first position, dataset indices) of the whole epochs that cover positions [start, stop)."""
        o = self.orders[device]
        shard = np.asarray(o.shard)
        n = len(shard)
        first, last = start // n, max(start, stop - 1) // n
        count = last - first + 1
        if n == 1:
            out = np.repeat(shard, count)
        elif n <= SMALL_SHARD and 0 <= o.seed <= _M32 and 0 <= device <= _M32 and 0 <= first \
                and last <= _M32:
            out = shard[permutations(self._seeds(device, o.seed, first, last), n).reshape(-1)]
        else:
            out = np.concatenate([epoch_permutation(shard, o.seed, device, e) for e in range(first, last + 1)])
        out = np.ascontiguousarray(out, dtype=np.int64)
        out.flags.writeable = False  # batches hold views of it
        return first * n, out

    def _seeds(self, device: int, seed: int, first: int, last: int) -> np.ndarray:
        """The seed words of epochs first..last of `device` ([E, 4] uint64), from blocks of `BLOCK`
        epochs seeded at once."""
        rows: list[np.ndarray] = []
        epoch = first
        while epoch <= last:
            block = self._words.get(device)
            if block is None or not block[0] <= epoch < block[0] + len(block[1]):
                epochs = np.arange(epoch, epoch + BLOCK, dtype=np.int64)
                epochs = epochs[epochs <= _M32]
                keys = np.stack([np.full(len(epochs), seed), np.full(len(epochs), device), epochs], axis=1)
                block = self._words[device] = (epoch, seed_words(keys))
            stop = min(last + 1, block[0] + len(block[1]))
            rows.append(block[1][epoch - block[0]:stop - block[0]])
            epoch = stop
        return rows[0] if len(rows) == 1 else np.concatenate(rows)

    def warm(self, positions: Any) -> None:
        """Compute ahead, vectorised over the devices, the seed words that each small-shard device's next
        `_block` reads: {device: own-stream position} (the streams' positions when a run starts). One
        `seed_words` call serves up to WARM_DEVICES devices instead of one call per device (numpy's fixed
        per-call cost is most of a block's cost: at 1,000 devices about a tenth of a short run). The words are
        the ones `_seeds` would compute (the same rows, the same block starts)."""
        todo: list[tuple[int, int, int]] = []  # (device, seed, first epoch)
        for device, pos in positions.items():
            o = self.orders[device]
            n = len(o.shard)
            first = int(pos) // n if n else 0
            if not 1 < n <= SMALL_SHARD or device in self._words or hasattr(o, "indices") \
                    or not (0 <= o.seed <= _M32 and 0 <= device <= _M32 and 0 <= first <= _M32 - BLOCK):
                continue
            todo.append((device, int(o.seed), first))
        span = np.arange(BLOCK, dtype=np.int64)
        for lo in range(0, len(todo), WARM_DEVICES):
            part = np.asarray(todo[lo:lo + WARM_DEVICES], dtype=np.int64)
            keys = np.empty((len(part), BLOCK, 3), dtype=np.int64)
            keys[:, :, 0] = part[:, 1:2]
            keys[:, :, 1] = part[:, 0:1]
            keys[:, :, 2] = part[:, 2:3] + span
            words = seed_words(keys.reshape(-1, 3)).reshape(len(part), BLOCK, 4)
            for (device, _, first), rows in zip(part.tolist(), words, strict=True):
                self._words[device] = (first, rows)

    def agrees(self, epochs: tuple[int, ...] = (0, 1, 7, BLOCK + 3)) -> bool:
        """Whether these orders equal fresh `ShardOrder`s on device 0 and the first device of each
        path (small shard, larger shard), in a fresh instance (the run's caches stay untouched)."""
        if not all(hasattr(o, "shard") and hasattr(o, "seed") and not hasattr(o, "indices") for o in self.orders):
            return False
        probe = EpochOrders(self.orders)
        sizes = [len(o.shard) for o in self.orders]
        picks = {0}
        for test in (lambda n: 1 < n <= SMALL_SHARD, lambda n: n > SMALL_SHARD):
            picks.update(next(([d] for d, n in enumerate(sizes) if test(n)), []))
        for o in (self.orders[d] for d in sorted(picks)):
            ref = ShardOrder(o.shard, o.seed, o.device)
            n = len(o.shard)
            for epoch in epochs:
                want = [ref.index(epoch * n + j) for j in range(n)]
                if probe.order(o.device, epoch).tolist() != want:
                    return False
        return True
