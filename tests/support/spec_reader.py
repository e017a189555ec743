"""A reader of model versions written only from docs/model-format.md, in plain Python: the standard library, numpy,
onnxruntime and confluent-kafka -- no edgestream import (tests/unit/test_model_format_spec.py checks that). What a
device in C, Go or Java implements; the spec tests read the committed test vectors and a real topic with it."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np

HEADER = struct.Struct("<4sBBHQIIQ32s32sH")  # docs/model-format.md, "A chunk"


class Refused(Exception):
    pass


def chunk(value: bytes) -> dict:
    """One chunk's fields, checked: magic, format 1, flags 0, sizes, the chunk checksum."""
    if len(value) < HEADER.size:
        raise Refused("short chunk")
    magic, fmt, flags, reserved, version, index, count, body_len, body_sha, chunk_sha, run_len = \
        HEADER.unpack_from(value)
    if magic != b"ESMV" or fmt != 1 or flags != 0 or reserved != 0:
        raise Refused("not a format-1 chunk")
    if not (1 <= count and index < count and 1 <= run_len <= 255 and len(value) >= HEADER.size + run_len):
        raise Refused("bad sizes")
    zeroed = value[:64] + bytes(32) + value[96:]
    if hashlib.sha256(zeroed).digest() != chunk_sha:
        raise Refused("chunk checksum")
    run = value[HEADER.size:HEADER.size + run_len].decode("utf-8")
    return {"version": version, "index": index, "count": count, "body_len": body_len, "body_sha": body_sha,
            "run": run, "slice": value[HEADER.size + run_len:]}


class Reader:
    """Chunks of run `run` in topic order -> complete, checked versions (each returned by `add` when its last chunk
    comes); Refused for what must be refused."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.partial: dict[int, dict] = {}

    def add(self, value: bytes | None) -> dict | None:
        if value is None:  # a tombstone
            return None
        c = chunk(value)
        if c["run"] != self.run:
            raise Refused("another run")
        held = self.partial.setdefault(c["version"], {"count": c["count"], "body_sha": c["body_sha"], "slices": {}})
        if (held["count"], held["body_sha"]) != (c["count"], c["body_sha"]):
            del self.partial[c["version"]]
            raise Refused("inconsistent chunks")
        held["slices"][c["index"]] = c["slice"]
        if len(held["slices"]) < held["count"]:
            return None
        del self.partial[c["version"]]
        body = b"".join(held["slices"][i] for i in range(held["count"]))
        if len(body) != c["body_len"] or hashlib.sha256(body).digest() != c["body_sha"]:
            raise Refused("body checksum")
        (meta_len,) = struct.unpack_from("<I", body)
        meta = json.loads(body[4:4 + meta_len].decode("utf-8"))
        if meta["format"] != "edgestream.model" or meta["format_version"] != 1:
            raise Refused("metadata format")
        if meta["run"] != self.run or meta["version"] != c["version"]:
            raise Refused("metadata run or version")
        files, pos = {}, 4 + meta_len
        for f in meta["files"]:
            data = body[pos:pos + f["size"]]
            if len(data) != f["size"] or hashlib.sha256(data).hexdigest() != f["sha256"]:
                raise Refused("file checksum")
            files[f["name"]] = data
            pos += f["size"]
        if pos != len(body):
            raise Refused("trailing bytes")
        return {"version": c["version"], "meta": meta, "files": files}


def predict(version: dict, x: np.ndarray) -> np.ndarray:
    """The version's model.onnx on records `x` (the metadata's input dtype and shape, batched): its outputs."""
    import onnxruntime as ort

    spec = version["meta"]["input"]
    x = np.asarray(x, dtype=spec["dtype"]).reshape(-1, *spec["shape"])
    session = ort.InferenceSession(version["files"]["model.onnx"], providers=["CPUExecutionProvider"])
    return session.run(None, {version["meta"]["onnx"]["input"]: x})[0]
