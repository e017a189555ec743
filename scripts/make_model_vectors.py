"""Write the model-version format's test vectors (docs/model-format.md, "Test vectors") to
tests/vectors/model_format/: the messages of two versions of a small model, as a models topic holds them, and
damaged messages, each as bytes, with vectors.json saying what a reader must make of them.

    .venv/bin/python scripts/make_model_vectors.py

The committed files are the vectors; running this again writes new ones (ONNX bytes depend on the exporter)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgestream.edge.model_format import (  # noqa: E402
    ONNX_FILE,
    WEIGHTS_FILE,
    body_of,
    chunk_body,
    encode,
    metadata,
)
from edgestream.publish.export import export  # noqa: E402

OUT = ROOT / "tests" / "vectors" / "model_format"
RUN = "vectors-ddl-r1"
CHUNK = 1024


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    facts = {"model": {"name": "vectors:tiny", "kwargs": {}}, "task": "classification",
             "input": {"shape": [4], "dtype": "uint8",
                       "normalization": {"kind": "affine", "scale": [1 / 255], "bias": [-0.5]}},
             "output": {"size": 3, "classes": ["low", "mid", "high"], "target_shape": None},
             "config_pin": "0123456789abcdef"}
    x = np.array([[0, 64, 128, 255], [255, 0, 10, 20], [7, 7, 7, 7]], dtype=np.uint8)
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    messages, expect, versions = [], {}, {}

    def add(name: str, key: bytes | None, value: bytes | None, headers=None) -> None:
        if value is not None:
            (OUT / name).write_bytes(value)
        messages.append({"file": name if value is not None else None, "key": key.decode() if key else None,
                         "headers": [[k, v.decode()] for k, v in headers or []]})

    for v, step in ((1, 10), (2, 20)):
        if v == 2:
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1.5)
        made = export(model, v, facts, ("onnx", "safetensors"))
        meta = {**facts, "step": step, "run_time_s": float(step) / 10, "created_unix": 1767225600.0 + step,
                "metrics": {"heldout": {"accuracy": 0.5 + v / 10, "loss": 1.0 / v}, "prequential": None},
                "onnx": made.onnx, "onnx_error": None}
        for i, (key, value, headers) in enumerate(encode(RUN, v, meta, made.files, CHUNK)):
            add(f"v{v}-chunk{i}.bin", key, value, headers)
        with torch.no_grad():
            out = model(torch.from_numpy(x.astype(np.float32) / np.float32(255) - np.float32(0.5))).numpy()
        versions[str(v)] = {"step": step, "files": {n: hashlib.sha256(b).hexdigest() for n, b in made.files.items()},
                            "outputs": out.tolist(), "predictions": out.argmax(1).tolist()}
        if v == 1:
            v1 = (meta, made.files)
    # what a reader must refuse, each after the good versions (the latest good stays 2)
    meta, files = v1
    bad = encode(RUN, 3, meta, files, CHUNK)
    key, value, headers = bad[0]
    bad[0] = (key, value[:-1] + bytes([value[-1] ^ 1]), headers)  # one bit of chunk 0's slice
    refused = []
    for i, (key, value, headers) in enumerate(bad):
        add(f"bad-v3-chunk{i}.bin", key, value, headers)
    refused.append({"version": 3, "why": "chunk checksum", "file": "bad-v3-chunk0.bin"})
    doc = metadata(RUN, 4, meta, files)
    doc["files"][0]["sha256"] = hashlib.sha256(b"not this graph").hexdigest()
    for i, (key, value, headers) in enumerate(chunk_body(RUN, 4, body_of(doc, files), CHUNK)):
        add(f"bad-v4-chunk{i}.bin", key, value, headers)
    refused.append({"version": 4, "why": "file checksum", "file": ONNX_FILE})
    for i, (key, value, headers) in enumerate(encode("another-ddl-r9", 5, meta, files, CHUNK)):
        add(f"foreign-v5-chunk{i}.bin", key, value, headers)
    refused.append({"version": 5, "why": "another run", "run": "another-ddl-r9"})
    add("tombstone-v1-chunk0", b"v1.0", None)  # an old version's chunk deleted: skipped by a reader
    expect = {"run": RUN, "latest": 2, "versions": versions, "refused": refused,
              "input": x.tolist(), "input_dtype": "uint8", "tolerance": {"atol": 1e-5, "rtol": 1e-4},
              "files_order": [ONNX_FILE, WEIGHTS_FILE]}
    (OUT / "vectors.json").write_text(json.dumps({"messages": messages, "expect": expect}, indent=1) + "\n")
    print(f"{len(messages)} messages in {OUT}")


if __name__ == "__main__":
    main()
