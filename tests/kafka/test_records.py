"""Issue 33 item 2: record formats (edgestream.data.records) -- each built-in decoder, from bytes and from
message objects (keys, headers, offsets, timestamps), on well-formed and malformed records: a bad record goes
to `bad` with a reason naming the field and never into the batch; a mixed batch keeps its order. The last
test decodes real Kafka messages (a plain confluent_kafka Producer and Consumer)."""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgestream.data.records import DECODER_FIELDS, RecordDecoder, RecordFormat, build_decoder
from edgestream.data.serde import SampleSerde
from edgestream.data.validate import DeviceRule, SampleSpec

RULE = DeviceRule(1, 4)


class Msg:
    """What the decoders read of a confluent_kafka Message."""

    def __init__(self, value, key=None, offset=0, ts_ms=None, headers=None):
        self._v, self._k, self._o, self._t, self._h = value, key, offset, ts_ms, headers

    def value(self):
        return self._v

    def key(self):
        return self._k

    def offset(self):
        return self._o

    def timestamp(self):
        return (0, -1) if self._t is None else (1, self._t)

    def headers(self):
        return self._h


def cls_spec(shape=(8,), classes=3, dtype=np.float32):
    return SampleSpec(dtype, shape, classes)


def reg_spec(shape=(8,), tshape=(), dtype=np.float32):
    return SampleSpec(dtype, shape, 0, target_shape=tshape)


def jrec(**fields) -> bytes:
    return json.dumps(fields).encode()


def reasons(bad):
    return [r for _, r in bad]


# ---------------------------------------------------------------- json
@pytest.mark.parametrize("shape", [(8,), (4, 6), (3, 5, 5), (1,)])
@pytest.mark.parametrize("classes", [2, 10])
def test_json_classification_shapes(shape, classes):
    rng = np.random.default_rng(classes)
    x = rng.normal(size=(16, *shape)).astype(np.float32)
    y = rng.integers(0, classes, 16)
    dec = build_decoder(RecordFormat("json", cls_spec(shape, classes), input="v", target="y"))
    batch, bad = dec.decode([jrec(v=r.tolist(), y=int(c)) for r, c in zip(x, y, strict=True)], RULE)
    assert bad == []
    assert batch.x.dtype == np.float32 and batch.x.shape == (16, *shape)
    np.testing.assert_array_equal(batch.x, x)
    assert batch.labels.dtype == np.int64 and batch.labels.tolist() == y.tolist()
    assert batch.devices.tolist() == [1] * 16 and batch.seqs.tolist() == list(range(16))
    assert batch.seqs.dtype == np.uint64 and batch.produce_times.dtype == np.float64
    assert dec.normalize is None and dec.spec.dtype == np.float32 and dec.message_bytes > 0


@pytest.mark.parametrize("tshape", [(), (3,)])
def test_json_regression_targets_and_nested_paths(tshape):
    spec = reg_spec((2, 3), tshape)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 2, 3))
    t = rng.normal(size=(5, *tshape))
    msgs = [jrec(reading={"values": r.tolist(), "unit": "C"}, out={"y": v.tolist()}) for r, v in zip(x, t, strict=True)]
    dec = build_decoder(RecordFormat("json", spec, input="reading.values", target="out.y"))
    batch, bad = dec.decode(msgs, RULE)
    assert bad == []
    np.testing.assert_array_equal(batch.x, x.astype(np.float32))
    assert batch.labels.dtype == np.float32 and batch.labels.shape == (5, *tshape)
    np.testing.assert_array_equal(batch.labels, t.astype(np.float32))
    # a scalar input is shape (1,); a field whose own name holds the dot
    dec1 = build_decoder(RecordFormat("json", reg_spec((1,)), input="a.b", target="y"))
    b1, bad1 = dec1.decode([jrec(**{"a.b": 2.5, "y": 1}), jrec(a={"b": [3]}, y=2.0)], RULE)
    assert bad1 == [] and b1.x.tolist() == [[2.5], [3.0]] and b1.labels.tolist() == [1.0, 2.0]


JSON_BAD = [  # (record, reason) for spec (8,), 3 classes, input 'v', target 'cls'
    (jrec(w=[0] * 8, cls=1), "missing_field: input 'v' not in the record"),
    (jrec(v=[0] * 8), "missing_field: target 'cls' not in the record"),
    (jrec(v=[0] * 8, cls="a"), "bad_field: target 'cls' is a string; must be an integer class index in [0, 3)"),
    (jrec(v=[0] * 8, cls=True), "bad_field: target 'cls' is a bool; must be an integer class index in [0, 3)"),
    (jrec(v=[0] * 8, cls=1.5), "bad_field: target 'cls' is a float (1.5); must be an integer class index in [0, 3)"),
    (jrec(v=[0] * 8, cls=None), "bad_field: target 'cls' is null; must be an integer class index in [0, 3)"),
    (jrec(v=[0] * 8, cls=3), "bad_label: target 'cls' is 3; must be in [0, 3)"),
    (jrec(v=[0] * 8, cls=-1), "bad_label: target 'cls' is -1; must be in [0, 3)"),
    (jrec(v=[0] * 7, cls=1), "shape_mismatch: input 'v' has shape (7,); must be (8,)"),
    (jrec(v=[[0] * 4] * 2, cls=1), "shape_mismatch: input 'v' has shape (2, 4); must be (8,)"),
    (jrec(v=[[0] * 4, [0] * 3], cls=1), "shape_mismatch: input 'v' is a ragged list; must have shape (8,)"),
    (jrec(v=["a"] * 8, cls=1), "bad_field: input 'v' holds strings; must be numbers of shape (8,)"),
    (jrec(v=[{"a": 1}] * 8, cls=1), "bad_field: input 'v' holds non-numbers (null, objects, mixed or huge values); "
                                    "must be numbers of shape (8,)"),
    (jrec(v="01234567", cls=1), "bad_field: input 'v' is a string; must be numbers of shape (8,)"),
    (jrec(v=[None] * 8, cls=1), "bad_field: input 'v' holds non-numbers (null, objects, mixed or huge values); "
                                "must be numbers of shape (8,)"),
    (b"[1, 2]", "bad_json: the record is a list, not an object"),
    (b"7", "bad_json: the record is a int, not an object"),
]


def test_json_malformed_records_name_the_field_and_a_mixed_batch_keeps_order():
    dec = build_decoder(RecordFormat("json", cls_spec(), input="v", target="cls"))
    good = [jrec(v=[i] * 8, cls=i % 3) for i in range(len(JSON_BAD) + 1)]
    msgs, want_bad, want_rows = [], [], []
    for i, (rec, reason) in enumerate(JSON_BAD):
        msgs.append(Msg(good[i], offset=100 + 2 * i, ts_ms=5000 + i))
        want_rows.append(i)
        msgs.append(Msg(rec, offset=101 + 2 * i))
        want_bad.append((2 * i + 1, reason))
    msgs += [Msg(b"{not json", offset=900), Msg(b"", offset=901), Msg(None, offset=902)]
    batch, bad = dec.decode(msgs, RULE)
    assert bad[:len(want_bad)] == want_bad
    assert [r.split(":")[0] for r in reasons(bad[len(want_bad):])] == ["bad_json"] * 3
    assert batch.accepted == [msgs[2 * i] for i in want_rows]
    assert batch.x[:, 0].tolist() == [float(i) for i in want_rows]
    assert batch.labels.tolist() == [i % 3 for i in want_rows]
    assert batch.seqs.tolist() == [100 + 2 * i for i in want_rows]
    assert batch.produce_times.tolist() == [5 + i / 1000 for i in want_rows]
    # bools in an input are 0 / 1, alone or mixed with numbers, in a batch or alone
    b, bad = dec.decode([jrec(v=[True, False] * 4, cls=0), jrec(v=[1.5, True] * 4, cls=0)], RULE)
    assert bad == [] and b.x.tolist() == [[1, 0] * 4, [1.5, 1] * 4]
    b, bad = dec.decode([jrec(v=[True, False] * 4, cls=0), b"[]"], RULE)
    assert len(bad) == 1 and b.x.tolist() == [[1, 0] * 4]
    # odd items: a bytearray, a message without an offset (its index stands in), a broken message object
    class Broken(Msg):
        def value(self):
            raise RuntimeError("gone")

    odd = [bytearray(good[0]), Msg(good[1], offset=None), Broken(good[2])]
    b, bad = dec.decode(odd, RULE)
    assert b.seqs.tolist() == [0, 1] and bad == [(2, "decode_error: RuntimeError: gone")]
    # one bad record alone: no batch
    assert dec.decode([JSON_BAD[0][0]], RULE) == (None, [(0, JSON_BAD[0][1])])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), st.integers(0, len(JSON_BAD) - 1), st.integers(0, 4)), min_size=1,
                max_size=30))
def test_json_any_mix_accepts_exactly_the_good_records(items):
    dec = build_decoder(RecordFormat("json", cls_spec((8,), 5), input="v", target="cls"))
    msgs = [jrec(v=[k + 0.5] * 8, cls=k) if ok else JSON_BAD[b][0] for ok, b, k in items]
    batch, bad = dec.decode(msgs, RULE)
    good = [i for i, (ok, _, _) in enumerate(items) if ok]
    # with 5 classes, cls=3 is a valid label: the bad_label records of 3 classes may pass
    expect_bad = [i for i, (ok, b, _) in enumerate(items) if not ok and JSON_BAD[b][0] != jrec(v=[0] * 8, cls=3)]
    assert [i for i, _ in bad] == expect_bad
    rows = [m for i, m in enumerate(msgs) if i not in set(expect_bad)]
    if not rows:
        assert batch is None
        return
    assert batch.accepted == rows and len(batch) == len(rows) == len(batch.x)
    assert batch.x[[i for i, m in enumerate(rows) if m in [msgs[g] for g in good]], 0].tolist() == \
        [items[g][2] + 0.5 for g in good]


def test_json_float_targets_refuse_nan_and_bad_shapes():
    dec = build_decoder(RecordFormat("json", reg_spec((2,), (2,)), input="x", target="t"))
    nan = b'{"x": [1, 2], "t": [NaN, 1]}'  # not strict JSON: orjson refuses it
    batch, bad = dec.decode([jrec(x=[1, 2], t=[1, 2]), jrec(x=[1, 2], t=[1, 2, 3]), jrec(x=[1, 2], t="1,2"),
                             b'{"x": [1, 2], "t": [1e39, 1]}', nan], RULE)
    assert bad == [(1, "shape_mismatch: target 't' has shape (3,); must be numbers of shape (2,)"),
                   (2, "bad_field: target 't' is a string; must be numbers of shape (2,)"),
                   (3, "bad_target: target 't' is not finite ([inf, 1.0])"),
                   (4, bad[3][1])]
    assert bad[3][1].startswith("bad_json: not JSON")
    assert batch.labels.tolist() == [[1.0, 2.0]]


# ---------------------------------------------------------------- keys, devices, torch
def test_keyed_topics_check_the_key_and_injection_takes_any_device():
    fmt = RecordFormat("json", cls_spec((2,)), input="v", target="c", keyed=True)
    dec = build_decoder(fmt)
    rec = jrec(v=[1, 2], c=0)
    msgs = [Msg(rec, key=b"1", offset=7), Msg(rec, key=b"2"), Msg(rec, key=None), Msg(rec, key=b"01"),
            Msg(rec, key="1", offset=9)]
    batch, bad = dec.decode(msgs, RULE)
    assert bad == [(1, "device_mismatch: key '2' is not this stream's device 1"),
                   (2, "device_mismatch: key None (no key) is not this stream's device 1"),
                   (3, "device_mismatch: key '01' is not this stream's device 1")]
    assert batch.devices.tolist() == [1, 1] and batch.seqs.tolist() == [7, 9]
    inj = DeviceRule(1, 4, injected=True)
    batch, bad = dec.decode([Msg(rec, key=b"3"), Msg(rec, key=b"4"), Msg(rec, key=b"x"), Msg(rec, key=b"0")], inj)
    assert bad == [(1, "device_mismatch: key '4' is not a device in [0, 4)"),
                   (2, "device_mismatch: key 'x' is not a device id")]
    assert batch.devices.tolist() == [3, 0]
    # not keyed: an injection's key names the origin device when it is one, else the rule's device
    plain = build_decoder(RecordFormat("json", cls_spec((2,)), input="v", target="c"))
    batch, bad = plain.decode([Msg(rec, key=b"2"), Msg(rec, key=b"src-a"), Msg(rec, key=b"9")], inj)
    assert batch.devices.tolist() == [2, 1] and reasons(bad) == ["device_mismatch: key '9' is not a device in [0, 4)"]
    # not keyed, a device stream: keys are not looked at
    batch, bad = plain.decode([Msg(rec, key=b"2")], RULE)
    assert bad == [] and batch.devices.tolist() == [1]


def test_decode_to_a_torch_device():
    torch = pytest.importorskip("torch")
    dec = build_decoder(RecordFormat("json", cls_spec((3,)), input="v", target="c"))
    batch, _ = dec.decode([jrec(v=[1, 2, 3], c=2)], RULE, device="cpu")
    assert isinstance(batch.x, torch.Tensor) and batch.x.dtype == torch.float32
    assert batch.x.tolist() == [[1.0, 2.0, 3.0]]


# ---------------------------------------------------------------- avro
SCHEMA = {"type": "record", "name": "Reading", "namespace": "plant", "fields": [
    {"name": "device", "type": "int"},
    {"name": "values", "type": {"type": "array", "items": "float"}},
    {"name": "meta", "type": {"type": "record", "name": "Meta", "fields": [{"name": "label", "type": "int"}]}},
    {"name": "grid", "type": {"type": "array", "items": {"type": "array", "items": "double"}}},
    {"name": "y", "type": ["null", "double"]},
]}


@pytest.fixture
def avsc(tmp_path):
    p = tmp_path / "reading.avsc"
    p.write_text(json.dumps(SCHEMA))
    return str(p)


def avro_bytes(rec, framing=None):
    import fastavro

    buf = io.BytesIO()
    if framing is not None:
        buf.write(b"\x00" + struct.pack(">I", framing))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(SCHEMA), rec)
    return buf.getvalue()


def reading(values, label=0, grid=((0.0,),), y=None):
    return {"device": 1, "values": list(values), "meta": {"label": label}, "grid": [list(r) for r in grid], "y": y}


def test_avro_records_plain_and_confluent(avsc):
    spec = cls_spec((4,), 3)
    dec = build_decoder(RecordFormat("avro", spec, input="values", target="meta.label", schema=avsc))
    msgs = [avro_bytes(reading([i, 1, 2, 3], i % 3)) for i in range(5)]
    msgs.insert(2, avro_bytes(reading([1, 2, 3], 1)))
    msgs.insert(4, msgs[0][:-3])
    msgs.insert(5, msgs[0] + b"\x00\x00")
    msgs.insert(6, avro_bytes(reading([1, 2, 3, 4], 7)))
    batch, bad = dec.decode(msgs, RULE)
    assert [(i, r.split(":")[0]) for i, r in bad] == [(2, "shape_mismatch"), (4, "bad_avro"), (5, "bad_avro"),
                                                      (6, "bad_label")]
    assert bad[0][1] == "shape_mismatch: input 'values' has shape (3,); must be (4,)"
    assert bad[2][1] == "bad_avro: 2 byte(s) after the record (another schema?)"
    assert batch.x[:, 0].tolist() == [0, 1, 2, 3, 4] and batch.labels.tolist() == [0, 1, 2, 0, 1]
    # a 2-D input and a float target from a union; Confluent framing with its schema id checked
    fmt = RecordFormat("avro", reg_spec((2, 2)), input="grid", target="y", schema=avsc,
                       options={"framing": "confluent", "schema_id": 42})
    dec = build_decoder(fmt)
    good = avro_bytes(reading([], grid=((1, 2), (3, 4)), y=0.5), framing=42)
    batch, bad = dec.decode([good, avro_bytes(reading([], grid=((1, 2), (3, 4)), y=0.5)),
                             avro_bytes(reading([], grid=((1, 2), (3, 4)), y=0.5), framing=41),
                             avro_bytes(reading([], grid=((1, 2), (3, 4))), framing=42)], RULE)
    assert batch.x.tolist() == [[[1, 2], [3, 4]]] and batch.labels.tolist() == [0.5]
    assert reasons(bad)[1:] == ["bad_avro: schema id 41; must be 42",
                                "bad_field: target 'y' is null; must be a number"]
    assert reasons(bad)[0].startswith("bad_avro: ")


def test_avro_build_errors(avsc, tmp_path):
    spec = cls_spec((4,))

    def err(**kw):
        with pytest.raises(ValueError) as e:
            build_decoder(RecordFormat("avro", spec, **{"input": "values", "target": "meta.label", "schema": avsc,
                                                        **kw}))
        assert "\n" not in str(e.value)
        return str(e.value)

    assert err(input="vals") == ("streams.input: 'vals' is not a field of the Avro schema (the schema's fields: "
                                 "device, values, meta, grid, y)")
    assert err(target="meta.cls") == ("streams.target: 'meta.cls' is not a field of the Avro schema (record "
                                      "'meta''s fields: label)")
    assert err(schema=str(tmp_path / "none.avsc")).startswith("streams.schema: cannot read ")
    (tmp_path / "bad.avsc").write_text('{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}')
    assert err(schema=str(tmp_path / "bad.avsc")).startswith("streams.schema: ")
    assert err(schema=None) == "streams.schema: required for format 'avro' (the .avsc file of the records' Avro schema)"
    assert err(options={"framing": "magic"}) == "streams.options: framing 'magic' is not allowed; must be one of plain, confluent"
    assert err(options={"zip": 1}).startswith("streams.options: format 'avro' does not take 'zip'")
    assert err(dtype="uint8") == "streams.dtype: format 'avro' does not take it (it takes input, target, schema, options)"


# ---------------------------------------------------------------- raw and npy
@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32", "float64"])
@pytest.mark.parametrize("shape", [(6,), (2, 3), (1, 2, 3)])
def test_raw_dtypes_shapes_and_header_targets(dtype, shape):
    rng = np.random.default_rng(1)
    x = (rng.random((6, *shape)) * 200).astype(dtype)
    y = rng.integers(0, 4, 6)
    dec = build_decoder(RecordFormat("raw", cls_spec(shape, 4, dtype), dtype=dtype))
    msgs = [Msg(r.astype(np.dtype(dtype).newbyteorder("<")).tobytes(), headers=[("target", str(c).encode())],
                offset=i) for i, (r, c) in enumerate(zip(x, y, strict=True))]
    batch, bad = dec.decode(msgs, RULE)
    assert bad == [] and batch.x.dtype == np.float32
    np.testing.assert_array_equal(batch.x, x.astype(np.float32))
    assert batch.labels.tolist() == y.tolist() and dec.message_bytes == x[0].nbytes
    assert dec.spec.dtype == np.dtype(dtype)


def test_raw_malformed_and_targets_from_the_key():
    spec = reg_spec((4,), (2,))
    dec = build_decoder(RecordFormat("raw", spec, target="t"))
    v = np.arange(4, dtype="<f4").tobytes()
    msgs = [Msg(v, headers=[("t", b"1.5,2")]), Msg(v[:-1], headers=[("t", b"1,2")]), Msg(v),
            Msg(v, headers=[("t", b"1")]), Msg(v, headers=[("t", b"a,b")]), Msg(v, headers=[("t", b"nan,1")]),
            Msg(v, headers=[("x", b"1,1"), ("t", b"0,-1")])]
    batch, bad = dec.decode(msgs, RULE)
    assert bad == [(1, "bad_length: the value has 15 bytes; must be 16 (4 float32)"),
                   (2, "missing_field: header 't' is not in the message"),
                   (3, "shape_mismatch: header 't' has 1 value(s); must be 2"),
                   (4, "bad_field: header 't' is 'a,b'; must be 2 decimal number(s) separated by commas"),
                   (5, "bad_target: header 't' is not finite (nan,1)")]
    assert batch.labels.tolist() == [[1.5, 2.0], [0.0, -1.0]] and batch.x.tolist() == [[0, 1, 2, 3]] * 2
    keyed = build_decoder(RecordFormat("raw", cls_spec((4,), 3), target_from="key"))
    batch, bad = keyed.decode([Msg(v, key=b"2"), Msg(v, key=b"3"), Msg(v, key=b"x"), Msg(v)], RULE)
    assert bad == [(1, "bad_label: key is 3; must be in [0, 3)"),
                   (2, "bad_field: key is 'x'; must be a decimal class index in [0, 3)"),
                   (3, "missing_field: key is not in the message")]
    assert batch.labels.tolist() == [2]
    with pytest.raises(ValueError, match=r"^streams.target_from: key is not allowed on a keyed topic"):
        build_decoder(RecordFormat("raw", cls_spec((4,)), target_from="key", keyed=True))
    with pytest.raises(ValueError, match=r"^streams.target_from: 'value' is not allowed; must be one of header, key$"):
        build_decoder(RecordFormat("raw", cls_spec((4,)), target_from="value"))
    with pytest.raises(ValueError, match=r"^streams.dtype: 'uint16' is not allowed; must be one of uint8, "):
        build_decoder(RecordFormat("raw", cls_spec((4,)), dtype="uint16"))
    with pytest.raises(ValueError, match=r"^streams.input: format 'raw' does not take it"):
        build_decoder(RecordFormat("raw", cls_spec((4,)), input="v"))


def npy_bytes(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=True)
    return buf.getvalue()


@pytest.mark.parametrize("dtype", ["uint8", "float32", ">f8"])
def test_npy_records(dtype):
    shape = (2, 3)
    spec = cls_spec(shape, 5, np.dtype(dtype).newbyteorder("="))
    dec = build_decoder(RecordFormat("npy", spec))
    a = (np.arange(6).reshape(shape) * 3).astype(dtype)
    hdr = [("target", b"4")]
    msgs = [Msg(npy_bytes(a), headers=hdr), Msg(npy_bytes(np.asfortranarray(a + 1)), headers=hdr),
            Msg(npy_bytes(a.astype(np.int16)), headers=hdr), Msg(npy_bytes(a.reshape(6)), headers=hdr),
            Msg(npy_bytes(np.array([{"x": 1}], dtype=object)), headers=hdr), Msg(b"\x93NUMPY", headers=hdr),
            Msg(npy_bytes(a)[:-1], headers=hdr), Msg(npy_bytes(a), headers=[("target", b"5")]),
            Msg(b"plain bytes", headers=hdr), Msg(npy_bytes(a), headers=hdr)]
    batch, bad = dec.decode(msgs, RULE)
    size = a.nbytes
    assert bad == [(2, f"bad_npy: dtype int16; must be {spec.dtype}"),
                   (3, "shape_mismatch: the array has shape (6,); must be (2, 3)"),
                   (4, "bad_npy: an object array (pickled); refused"),
                   (5, "bad_npy: not a .npy file (no \\x93NUMPY magic)"),
                   (6, f"bad_npy: {size - 1} data bytes; must be {size}"),
                   (7, "bad_label: header 'target' is 5; must be in [0, 5)"),
                   (8, "bad_npy: not a .npy file (no \\x93NUMPY magic)")]
    np.testing.assert_array_equal(batch.x, np.stack([a, a + 1, a]).astype(np.float32))
    assert batch.labels.tolist() == [4, 4, 4]


# ---------------------------------------------------------------- edgestream (the binary wire)
@pytest.mark.parametrize("spec", [cls_spec((3, 4, 4), 10, np.uint8), reg_spec((5,), (2,), np.float16)])
def test_edgestream_format_is_the_wire_as_float32(spec):
    serde = SampleSerde(spec)
    rng = np.random.default_rng(2)
    x = (rng.random((4, *spec.shape)) * 100).astype(spec.dtype)
    tg = [int(c) for c in rng.integers(0, 10, 4)] if spec.target_shape is None else \
        [np.float16([0.5, -1.0])] * 4
    msgs = [serde.encode(r, t, 1, 10 + i, 1000.0 + i) for i, (r, t) in enumerate(zip(x, tg, strict=True))]
    msgs.insert(1, serde.encode(x[0], tg[0], 2, 0, 0.0))  # another device's
    dec = build_decoder(RecordFormat("edgestream", spec, dtype=str(spec.dtype)))
    batch, bad = dec.decode(msgs, RULE)
    assert bad == [(1, "device_mismatch")]
    assert batch.x.dtype == np.float32
    np.testing.assert_array_equal(batch.x, x.astype(np.float32))
    assert batch.seqs.tolist() == [10, 11, 12, 13] and batch.produce_times.tolist() == [1000, 1001, 1002, 1003]
    assert dec.message_bytes == spec.length and dec.normalize is None
    keyed = build_decoder(RecordFormat("edgestream", spec, keyed=True))
    batch, bad = keyed.decode([Msg(msgs[0], key=b"1"), Msg(msgs[2], key=b"0"), Msg(msgs[1], key=b"1")], RULE)
    assert bad == [(1, "device_mismatch: key '0' is not this stream's device 1"), (2, "device_mismatch")]
    assert len(batch) == 1


# ---------------------------------------------------------------- build_decoder
def test_build_decoder_refusals():
    assert set(DECODER_FIELDS) == {"edgestream", "json", "avro", "raw", "npy"}
    with pytest.raises(ValueError, match=r"^streams.format: 'xml' is not a built-in record decoder or an installed "
                                         r"plugin; built-ins: edgestream, json, avro, raw, npy; or give an import"):
        build_decoder(RecordFormat("xml", cls_spec()))
    with pytest.raises(ValueError, match=r"^streams.input: required for format 'json' \(the record's field holding"):
        build_decoder(RecordFormat("json", cls_spec(), target="y"))
    with pytest.raises(ValueError, match=r"^streams.target_from: format 'json' does not take it \(it takes input, "
                                         r"target\)$"):
        build_decoder(RecordFormat("json", cls_spec(), input="x", target="y", target_from="key"))
    with pytest.raises(ValueError, match=r"^streams.options: format 'edgestream' does not take it"):
        build_decoder(RecordFormat("edgestream", cls_spec(), options={"a": 1}))
    with pytest.raises(ValueError, match=r"^streams.format: 'builtins:str' returned a str without spec, normalize, "
                                         r"message_bytes, decode; a decoder needs"):
        build_decoder(RecordFormat("builtins:str", cls_spec()))
    with pytest.raises(ValueError, match=r"^streams.format: decoder factory 'json:loads' raised TypeError: the JSON "):
        build_decoder(RecordFormat("json:loads", cls_spec()))


def test_a_decoder_without_a_batch_path_checks_each_record():
    class Csv(RecordDecoder):
        def record(self, value, message):
            *xs, y = value.decode().split(",")
            return [float(v) for v in xs], int(y)

    dec = Csv(RecordFormat("csv", cls_spec((2,), 3)))
    batch, bad = dec.decode([b"1,2,0", b"1,2,3,0", b"1,x,0", b"3,4,9", b"5,6,2"], RULE)
    assert bad == [(1, "shape_mismatch: input has shape (3,); must be (2,)"),
                   (2, "decode_error: ValueError: could not convert string to float: 'x'"),
                   (3, "bad_label: target is 9; must be in [0, 3)")]
    assert batch.x.tolist() == [[1, 2], [5, 6]] and batch.labels.tolist() == [0, 2]


# ---------------------------------------------------------------- real Kafka messages
@pytest.mark.kafka
def test_decode_real_kafka_messages(bootstrap, run_prefix):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"{run_prefix}-plant"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    prod = Producer({"bootstrap.servers": bootstrap})
    sent = []
    for i in range(6):
        key = b"1" if i != 3 else b"2"
        ts = 1_700_000_000_000 + 250 * i
        rec = np.full(4, i, "<f4").tobytes() if i != 4 else b"short"
        prod.produce(topic, rec, key=key, timestamp=ts, headers=[("target", str(i % 3).encode())])
        sent.append(ts)
    assert prod.flush(30) == 0
    cons = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{run_prefix}-g", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    cons.subscribe([topic])
    got = []
    try:
        for _ in range(60):
            got += [m for m in cons.consume(10, 1.0) if m.error() is None]
            if len(got) >= 6:
                break
    finally:
        cons.close()
    assert len(got) == 6
    dec = build_decoder(RecordFormat("raw", cls_spec((4,), 3), keyed=True))
    batch, bad = dec.decode(got, DeviceRule(1, 3))
    assert bad == [(3, "device_mismatch: key '2' is not this stream's device 1"),
                   (4, "bad_length: the value has 5 bytes; must be 16 (4 float32)")]
    assert batch.accepted == [got[i] for i in (0, 1, 2, 5)]
    assert batch.seqs.tolist() == [got[i].offset() for i in (0, 1, 2, 5)] == [0, 1, 2, 5]
    assert batch.produce_times.tolist() == [sent[i] / 1000 for i in (0, 1, 2, 5)]
    assert batch.x[:, 0].tolist() == [0, 1, 2, 5] and batch.labels.tolist() == [0, 1, 2, 2]
    assert batch.devices.tolist() == [1, 1, 1, 1]
