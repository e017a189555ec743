"""Record formats (issue 33 item 2): decode rates of the built-in record decoders side by side -- JSON
(orjson, and the stdlib's json for comparison), Avro (fastavro, schemaless), raw, npy and edgestream's binary
wire -- in samples/s of one process on one core (the decode of a batch of message values as bytes, no Kafka:
`decoder.decode(values, rule)` -> float32 x, targets, devices, seqs, times), for a few input shapes.

Every record is valid (the consumer's common case); inputs are float32 values (JSON: 4 decimals, as a sensor
writes them), a class target (raw / npy: a "target" header; here bytes items carry none, so raw and npy
are timed on message objects with headers). Passes alternate the formats; the median pass per format, in
wall and CPU seconds (a pass that waits for a shared core shows in wall only).

    python benchmarks/bench_record_decode.py [--batch 256] [--passes 7] [--seconds 0.25] [--shapes 8,3x32x32,64]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import record  # noqa: E402

from edgestream.data.records import RecordFormat, build_decoder  # noqa: E402
from edgestream.data.serde import SampleSerde  # noqa: E402
from edgestream.data.validate import DeviceRule, SampleSpec  # noqa: E402

RULE = DeviceRule(0, 1)


class Msg:
    """A Kafka message's accessors over prepared fields (raw / npy read their target from a header)."""

    __slots__ = ("_v", "_o", "_h")

    def __init__(self, value: bytes, offset: int, headers) -> None:
        self._v, self._o, self._h = value, offset, headers

    def value(self):
        return self._v

    def key(self):
        return None

    def offset(self):
        return self._o

    def timestamp(self):
        return (1, 1_700_000_000_000 + self._o)

    def headers(self):
        return self._h


def avro_schema(ndim: int) -> dict:
    items: object = "float"
    for _ in range(ndim - 1):
        items = {"type": "array", "items": items}
    return {"type": "record", "name": "Reading", "fields": [
        {"name": "values", "type": {"type": "array", "items": items}}, {"name": "label", "type": "int"}]}


def cases(shape: tuple[int, ...], n: int, folder: Path):
    """(label, decoder, messages) per format for `n` samples of `shape`, 10 classes."""
    import fastavro

    rng = np.random.default_rng(0)
    x64 = rng.normal(size=(n, *shape)).round(4)  # what a sensor writes: "-0.1234"
    x = x64.astype(np.float32)
    y = rng.integers(0, 10, n)
    spec = SampleSpec(np.float32, shape, 10)
    out = []
    js = [json.dumps({"values": r.tolist(), "label": int(c)}).encode() for r, c in zip(x64, y, strict=True)]
    fmt = RecordFormat("json", spec, input="values", target="label")
    out.append(("json (orjson)", build_decoder(fmt), js))
    out.append(("json (stdlib json)", "stdlib", js))
    schema = avro_schema(len(shape))
    path = folder / f"r{len(shape)}.avsc"
    path.write_text(json.dumps(schema))
    parsed = fastavro.parse_schema(schema)
    av = []
    for r, c in zip(x, y, strict=True):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {"values": r.tolist(), "label": int(c)})
        av.append(buf.getvalue())
    out.append(("avro", build_decoder(RecordFormat("avro", spec, input="values", target="label", schema=str(path))),
                av))
    heads = [[("target", str(int(c)).encode())] for c in y]
    out.append(("raw", build_decoder(RecordFormat("raw", spec)),
                [Msg(r.tobytes(), i, h) for i, (r, h) in enumerate(zip(x, heads, strict=True))]))
    npy = []
    for i, (r, h) in enumerate(zip(x, heads, strict=True)):
        buf = io.BytesIO()
        np.save(buf, r)
        npy.append(Msg(buf.getvalue(), i, h))
    out.append(("npy", build_decoder(RecordFormat("npy", spec)), npy))
    serde = SampleSerde(spec)
    wire = [serde.encode(r, int(c), 0, i, 1.7e9) for i, (r, c) in enumerate(zip(x, y, strict=True))]
    out.append(("edgestream (binary wire)", build_decoder(RecordFormat("edgestream", spec)), wire))
    return out


def stdlib_json(shape: tuple[int, ...]):
    """The json decoder with the standard library's parser in orjson's place."""
    dec = build_decoder(RecordFormat("json", SampleSpec(np.float32, shape, 10), input="values", target="label"))

    def parse_all(values):
        return [json.loads(v) for v in values]

    dec.parse_all = parse_all
    return dec


def one_pass(dec, msgs: list, batch: int, seconds: float) -> tuple[float, float]:
    """(samples per wall second, per CPU second) decoding `msgs` in batches for about `seconds`."""
    n = done = 0
    w0, c0 = time.perf_counter(), time.process_time()
    while True:
        for k in range(0, len(msgs), batch):
            b, bad = dec.decode(msgs[k:k + batch], RULE)
            assert not bad, bad[:1]
            n += len(b)
        done += 1
        if time.perf_counter() - w0 >= seconds:
            break
    return n / (time.perf_counter() - w0), n / max(time.process_time() - c0, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=0.25, help="per pass and format")
    ap.add_argument("--shapes", default="8,3x32x32,64")
    args = ap.parse_args()
    shapes = [tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes:
            n = args.batch * max(1, min(8, 4096 // max(1, math.prod(shape) // 8) // args.batch or 1))
            cs = [(label, stdlib_json(shape) if dec == "stdlib" else dec, msgs)
                  for label, dec, msgs in cases(shape, n, Path(tmp))]
            runs: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in cs}
            for _, dec, msgs in cs:  # warm: imports (torch, by the wire's serde), caches, buffers
                dec.decode(msgs[:args.batch], RULE)
            for _ in range(args.passes):
                for label, dec, msgs in cs:
                    runs[label].append(one_pass(dec, msgs, args.batch, args.seconds))
            for label, _, msgs in cs:
                size = statistics.mean(len(m if isinstance(m, bytes) else m.value()) for m in msgs)
                wall = statistics.median(r[0] for r in runs[label])
                cpu = statistics.median(r[1] for r in runs[label])
                rows.append({"shape": "x".join(map(str, shape)), "format": label, "bytes": round(size),
                             "samples_per_s_wall": round(wall), "samples_per_s_cpu": round(cpu)})
    print(f"\nbatch {args.batch}, median of {args.passes} passes, one process")
    print(f"{'shape':<9} {'format':<26} {'bytes/record':>12} {'samples/s wall':>15} {'samples/s cpu':>14} {'vs wire (cpu)':>13}")
    for shape in {r["shape"]: None for r in rows}:
        sub = [r for r in rows if r["shape"] == shape]
        base = next(r["samples_per_s_cpu"] for r in sub if r["format"].startswith("edgestream"))
        for r in sub:
            r["vs_wire_cpu"] = round(r["samples_per_s_cpu"] / base, 3)
            print(f"{shape:<9} {r['format']:<26} {r['bytes']:>12,} {r['samples_per_s_wall']:>15,} "
                  f"{r['samples_per_s_cpu']:>14,} {r['vs_wire_cpu']:>12.3f}x")
    record("record_decode", {"batch": args.batch, "passes": args.passes, "rows": rows})


if __name__ == "__main__":
    main()
