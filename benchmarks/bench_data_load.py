"""Loading ~100 MB of a user's data into a `Dataset` (issue 29's acceptance: reading Parquet/npz into the
device streams is not a run's bottleneck), beside the rate the producer streams it at.

Files are generated in a temporary folder: Parquet and CSV tables (64 float32 feature columns + an
integer class column), npz of float32 features (N, 64) and of uint8 images (N, 3, 32, 32). Each is
loaded with `load_dataset` (the run's path: read, dtype and target checks, seeded 80/20 split,
per-channel statistics) `--repeat` times; the table keeps the median. MB/s counts the inputs' bytes in
memory (what the producer streams), so formats compare on equal terms.

The producer's side: the ceiling measured by bench_producer_ceiling.py (41,649 samples/s of 3,120-byte
messages = 130 MB/s, docs/BENCHMARKS.md "Producer ceiling": the most all devices together stream on this
machine), and one device at 600 samples/s (bench_rate_accuracy.py's highest rate) in MB/s of this
dataset's samples. "x ceiling" = how many times faster the load is than the producer streams (bytes,
samples). The load happens once, before streaming starts.

    python benchmarks/bench_data_load.py [--mb 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import record  # noqa: E402

from edgestream.data import load_dataset  # noqa: E402

#: bench_producer_ceiling.py's measured figure (docs/BENCHMARKS.md): samples/s and bytes per message
PRODUCER_CEILING = (41_649, 3_120)
DEVICE_RATE = 600  # samples/s of one device stream (bench_rate_accuracy.py's highest)
FEATURES = 64


def _tables(folder: Path, mb: float, rng: np.random.Generator) -> dict[str, dict]:
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    rows = int(mb * 1e6 / (FEATURES * 4))
    x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    cols = {f"f{j}": x[:, j] for j in range(FEATURES)}
    cols["label"] = rng.integers(0, 10, rows)
    table = pa.table(cols)
    pq.write_table(table, folder / "t.parquet")
    out = {"parquet": {"name": "parquet", "path": str(folder / "t.parquet"), "target": "label"}}
    csv_rows = rows // 4  # CSV text is ~4x the bytes: a quarter of the rows keeps the file near `mb`
    pcsv.write_csv(table.slice(0, csv_rows), folder / "t.csv")
    out["csv"] = {"name": "csv", "path": str(folder / "t.csv"), "target": "label"}
    np.savez(folder / "f.npz", x=x, y=cols["label"])
    out["npz float32 (64,)"] = {"name": "npz", "path": str(folder / "f.npz")}
    n_img = int(mb * 1e6 / 3072)
    np.savez(folder / "i.npz", x=rng.integers(0, 256, (n_img, 3, 32, 32), dtype=np.uint8),
             y=rng.integers(0, 10, n_img))
    out["npz uint8 (3, 32, 32)"] = {"name": "npz", "path": str(folder / "i.npz")}
    return out


def _measure(kw: dict, repeat: int) -> dict:
    times, ds = [], None
    for _ in range(repeat):
        ds = None
        t0 = time.perf_counter()
        ds = load_dataset(**kw)
        times.append(time.perf_counter() - t0)
    assert ds is not None
    nbytes = ds.x_train.nbytes + ds.x_test.nbytes
    samples = len(ds.y_train) + len(ds.y_test)
    sample_bytes = ds.x_train[0].nbytes
    secs = statistics.median(times)
    return {"file_mb": Path(kw["path"]).stat().st_size / 1e6, "inputs_mb": nbytes / 1e6, "samples": samples,
            "sample_bytes": sample_bytes, "load_s": secs, "load_mb_s": nbytes / 1e6 / secs,
            "load_samples_s": samples / secs, "device_mb_s": DEVICE_RATE * sample_bytes / 1e6, "runs_s": times}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        for label, kw in _tables(Path(d), args.mb, np.random.default_rng(0)).items():
            rows[label] = _measure(kw, args.repeat)
    ceil_samples, ceil_bytes = PRODUCER_CEILING
    ceil_mb = ceil_samples * ceil_bytes / 1e6
    print(f"producer ceiling: {ceil_samples:,} samples/s of {ceil_bytes:,}-byte messages = {ceil_mb:.0f} MB/s "
          f"(all devices together); one device at {DEVICE_RATE}/s")
    print(f"{'format':24} {'file MB':>8} {'inputs MB':>9} {'load s':>7} {'load MB/s':>9} {'samples/s':>10} "
          f"{'x ceiling MB/s':>14} {'x ceiling samples/s':>19} {'1 device MB/s':>13}")
    for label, r in rows.items():
        print(f"{label:24} {r['file_mb']:8.1f} {r['inputs_mb']:9.1f} {r['load_s']:7.2f} {r['load_mb_s']:9.0f} "
              f"{r['load_samples_s']:10.0f} {r['load_mb_s'] / ceil_mb:14.1f} "
              f"{r['load_samples_s'] / ceil_samples:19.1f} {r['device_mb_s']:13.2f}")
    record("data_load", {"mb": args.mb, "repeat": args.repeat, "producer_ceiling": PRODUCER_CEILING,
                         "device_rate": DEVICE_RATE, "rows": rows})


if __name__ == "__main__":
    main()
