"""docs/wire-format.md is the wire format's specification for device clients (issue 33 item 5): its test
vectors, read from the document itself, decode to the values it states and are what edgestream's encoder
writes; a message built by hand from the spec's table (struct, not edgestream's encoder) is accepted by a
run's consumer side and decodes to the right batch; the document's C program prints the same bytes."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgestream.data import wire
from edgestream.data.serde import SampleSerde
from edgestream.data.validate import DeviceRule, SampleSpec

DOC = Path(__file__).resolve().parents[2] / "docs" / "wire-format.md"
_BLOCK = re.compile(r"^```(\w+) ((?:vector|refused)-[\w]+)\n(.*?)^```", re.S | re.M)


def _blocks() -> dict[tuple[str, str], str]:
    return {(lang, name): body for lang, name, body in _BLOCK.findall(DOC.read_text())}


def _hex(body: str) -> bytes:
    """The bytes of an annotated hex block: `#` starts a comment."""
    return bytes.fromhex("".join(line.split("#", 1)[0] for line in body.splitlines()))


BLOCKS = _blocks()
VECTORS = sorted(name for lang, name in BLOCKS if lang == "text" and name.startswith("vector-"))
REFUSED = sorted(name for lang, name in BLOCKS if name.startswith("refused-"))


def _vector(name: str) -> tuple[bytes, dict]:
    return _hex(BLOCKS[("text", name)]), json.loads(BLOCKS[("json", name)])


def _target(doc: dict):
    """The documented target as encode_sample takes it: an int class index, or a float array of its dtype."""
    if doc["target_dtype"] is None:
        return doc["target"]
    return np.asarray(doc["target"], dtype=doc["target_dtype"]).reshape(doc["target_shape"])


def test_the_document_has_its_vectors():
    assert len(VECTORS) >= 3 and all(("json", v) in BLOCKS for v in VECTORS)
    assert {n.removeprefix("refused-") for n in REFUSED} <= set(wire.REASONS) and len(REFUSED) >= 3


@pytest.mark.parametrize("name", VECTORS)
def test_a_vector_decodes_to_the_documented_values(name):
    value, doc = _vector(name)
    assert len(value) == doc["length"]
    s = wire.decode_sample(value)
    assert s.dtype == np.dtype(doc["dtype"]) and s.shape == tuple(doc["shape"])
    np.testing.assert_array_equal(s.x, np.asarray(doc["x"], dtype=doc["dtype"]))
    assert s.x.tolist() == doc["x"]  # exactly these numbers (float16 65504.0 included)
    assert (s.device, s.seq, s.produce_time) == (doc["device"], doc["seq"], doc["produce_time"])
    if doc["target_dtype"] is None:
        assert s.target_dtype is None and s.label == s.target == doc["target"]
    else:
        assert s.target_dtype == np.dtype(doc["target_dtype"]) and s.target_shape == tuple(doc["target_shape"])
        assert s.label == -1 and np.asarray(s.target).tolist() == doc["target"]
    # the header as SampleSerde reads it (restart scans, DLQ headers)
    head = SampleSerde.header(value)
    assert (head.seq, head.device, head.produce_time) == (doc["seq"], doc["device"], doc["produce_time"])


@pytest.mark.parametrize("name", VECTORS)
def test_edgestream_encodes_the_documented_values_to_the_vector(name):
    value, doc = _vector(name)
    x = np.asarray(doc["x"], dtype=doc["dtype"])
    assert wire.encode_sample(x, _target(doc), doc["device"], doc["seq"], doc["produce_time"]) == value
    spec = _spec(doc)
    assert SampleSerde(spec).encode(x, _target(doc), doc["device"], doc["seq"], doc["produce_time"]) == value


def _spec(doc: dict) -> SampleSpec:
    if doc["target_dtype"] is None:
        return SampleSpec(doc["dtype"], tuple(doc["shape"]), doc["target"] + 1)
    return SampleSpec(doc["dtype"], tuple(doc["shape"]), 0, tuple(doc["target_shape"]), doc["target_dtype"])


@pytest.mark.parametrize("name", VECTORS)
def test_a_run_of_the_vectors_layout_accepts_it(name):
    value, doc = _vector(name)
    spec = _spec(doc)
    rule = DeviceRule(doc["device"], doc["device"] + 1)
    assert spec.problem(value, rule) is None
    batch, bad = SampleSerde(spec).decode([value, value], rule)
    assert bad == [] and len(batch) == 2
    np.testing.assert_array_equal(batch.x[1], np.asarray(doc["x"], dtype=doc["dtype"]))
    assert batch.devices.tolist() == [doc["device"]] * 2 and batch.seqs.tolist() == [doc["seq"]] * 2
    assert batch.labels[0].tolist() == doc["target"]
    # another device's topic, or a run of another layout, refuses it with its documented reason
    assert spec.problem(value, DeviceRule(doc["device"] - 1 if doc["device"] else 1, 2**32)) == "device_mismatch"


@pytest.mark.parametrize("name", REFUSED)
def test_a_refused_vector_is_refused_with_its_reason(name):
    value = _hex(BLOCKS[("text", name)])
    reason = name.removeprefix("refused-")
    with pytest.raises(wire.WireError) as err:
        wire.decode_sample(value)
    assert err.value.reason == reason
    ok = wire.encode_sample(np.array([[0, 1], [2, 255]], np.uint8), 3, 1, 7, 1.5)
    assert wire.split_valid([ok, value, ok]) == ([0, 2], [(1, reason)])
    assert SampleSpec(np.uint8, (2, 2), 10).problem(value, DeviceRule(1, 2)) == reason


# ---------------------------------------------------------------- built by hand from the table
#: the spec's dtype codes (docs/wire-format.md), written out here rather than taken from edgestream
CODES = {"uint8": 0, "float32": 1, "float16": 2, "int16": 3, "int32": 4, "float64": 5, "int8": 6, "int64": 7}


def by_hand(x: np.ndarray, target, device: int, seq: int, produce_time: float) -> bytes:
    """A message value from the spec's table alone: struct.pack of the 48-byte header, then the payload and the
    float target, little-endian."""
    dims = list(x.shape) + [0] * (4 - x.ndim)
    if isinstance(target, int):
        tcode, label, tail = 0, target, b""
    else:
        t = np.asarray(target)
        tcode, label = CODES[t.dtype.name], (t.shape[0] if t.ndim else 0)
        tail = t.astype(t.dtype.newbyteorder("<")).tobytes()
    header = struct.pack("<4sBBBB4IiIQd", b"EDGS", 2, CODES[x.dtype.name], x.ndim, tcode, *dims, label, device, seq,
                         produce_time)
    assert len(header) == 48
    return header + x.astype(x.dtype.newbyteorder("<")).tobytes() + tail


def test_a_message_built_by_hand_is_accepted_and_decodes_to_its_batch():
    rng = np.random.default_rng(0)
    spec = SampleSpec(np.float32, (6, 5), 0, target_shape=(3,))
    xs = rng.normal(size=(4, 6, 5)).astype(np.float32)
    ys = rng.normal(size=(4, 3)).astype(np.float32)
    values = [by_hand(xs[k], ys[k], 2, 10 + k, 100.0 + k) for k in range(4)]
    batch, bad = SampleSerde(spec, None).decode(values, DeviceRule(2, 4))
    assert bad == []
    np.testing.assert_array_equal(batch.x, xs)
    np.testing.assert_array_equal(batch.labels, ys)
    assert batch.devices.tolist() == [2] * 4 and batch.seqs.tolist() == [10, 11, 12, 13]
    assert batch.produce_times.tolist() == [100.0, 101.0, 102.0, 103.0]
    # a class-index stream of uint8 images, normalised as a run's consumer does
    spec = SampleSpec(np.uint8, (3, 4, 4), 10)
    imgs = rng.integers(0, 256, size=(3, 3, 4, 4), dtype=np.uint8)
    values = [by_hand(imgs[k], k + 7, 0, k, 1.0) for k in range(3)]
    batch, bad = SampleSerde(spec, wire.Affine()).decode(values, DeviceRule(0, 1))
    assert bad == []
    np.testing.assert_array_equal(batch.x, imgs.astype(np.float32) * np.float32(1 / 255))
    assert batch.labels.tolist() == [7, 8, 9]


_dtypes = st.sampled_from(list(CODES))
_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)
_targets = st.one_of(st.integers(0, 2**31 - 1),
                     st.tuples(st.sampled_from(["float16", "float32", "float64"]), st.sampled_from([(), (1,), (3,)])))


@settings(max_examples=60, deadline=None)
@given(dtype=_dtypes, shape=_shapes, target=_targets, device=st.integers(0, 2**32 - 1),
       seq=st.integers(0, 2**64 - 1), t=st.floats(allow_nan=False), seed=st.integers(0, 2**16))
def test_by_hand_equals_edgestreams_encoder(dtype, shape, target, device, seq, t, seed):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    x = (rng.normal(size=shape) * 100).astype(dt) if dt.kind == "f" else rng.integers(
        np.iinfo(dt).min, np.iinfo(dt).max, size=shape, dtype=dt, endpoint=True)
    if not isinstance(target, int):
        target = rng.normal(size=target[1]).astype(target[0])
    value = by_hand(x, target, device, seq, t)
    assert value == wire.encode_sample(x, target, device, seq, t)
    s = wire.decode_sample(value)
    np.testing.assert_array_equal(s.x, x)
    assert (s.device, s.seq, s.produce_time) == (device, seq, t)


def test_the_documents_c_program_prints_the_vectors(tmp_path):
    # the Makefile's build needs a C compiler anyway (the C decoder): a machine without one fails here, not skips
    assert shutil.which("cc") is not None, "no C compiler (cc): install gcc to build edgestream's C decoder"
    code = re.search(r"^```c\n(.*?)^```", DOC.read_text(), re.S | re.M).group(1)
    (tmp_path / "wire.c").write_text(code)
    subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "wire"),
                    str(tmp_path / "wire.c")], check=True, capture_output=True, timeout=60)
    out = subprocess.run([str(tmp_path / "wire")], check=True, capture_output=True, text=True, timeout=10).stdout
    printed = {name: bytes.fromhex(rest) for name, _, rest in (line.partition(" ") for line in out.splitlines())}
    assert printed and set(printed) <= set(VECTORS)
    for name, value in printed.items():
        assert value == _vector(name)[0], name
