"""The ``raw`` and ``npy`` record formats: the message value is the input itself; the target comes from a
header or from the key.

- ``raw``: the value is the input's bytes, C order, little-endian, of `streams.dtype` (default: the spec's,
  float32) and the spec's shape; another length is ``bad_length``.
- ``npy``: the value is a .npy file's bytes (numpy's format, versions 1-3): its dtype (any byte order) and
  shape must be the spec's (``bad_npy`` / ``shape_mismatch``); object arrays are refused (no pickle).

The target (`streams.target_from`): ``header`` (the default): the header named `streams.target` (default
"target"); ``key``: the message key -- refused when the topic is keyed (the key names the device there).
Its text is a decimal class index, or decimal float(s) separated by commas (the target's shape).
"""

from __future__ import annotations

import math
import struct

import numpy as np

from edgestream.data.records import values as check
from edgestream.data.records.base import RecordDecoder, RecordError, header, key_of, with_dtype

TARGET_FROM = ("header", "key")
DEFAULT_HEADER = "target"
#: header bytes -> (dtype, shape, fortran order) or a reason; at most this many remembered
_CACHE_MAX = 64


class _TargetFrom:
    def __init__(self, fmt) -> None:
        src = fmt.target_from or "header"
        if src not in TARGET_FROM:
            raise ValueError(f"streams.target_from: {src!r} is not allowed; must be one of {', '.join(TARGET_FROM)}")
        if src == "key":
            if fmt.keyed:
                raise ValueError("streams.target_from: key is not allowed on a keyed topic (one topic without "
                                 "{device}: its message key names the device); use target_from: header")
            if fmt.target:
                raise ValueError("streams.target: names the target's header; target_from: key takes none")
        self.src, self.name = src, fmt.target or DEFAULT_HEADER
        self.what = f"header {self.name!r}" if src == "header" else "key"

    def text(self, message) -> bytes | None:
        return header(message, self.name) if self.src == "header" else key_of(message)


class _ValueDecoder(RecordDecoder):
    def __init__(self, fmt, spec) -> None:
        super().__init__(fmt, spec)
        if self.spec.dtype.kind not in "iuf":
            raise ValueError(f"streams.dtype: {self.spec.dtype} is not allowed; must be a numeric dtype")
        self.target_from = _TargetFrom(fmt)
        self.payload = math.prod(self.spec.shape) * self.spec.dtype.itemsize
        self._le = self.spec.dtype.newbyteorder("<")

    def targets(self, messages: list, bad: list, skip: set[int]) -> list:
        """Each message's target (None where bad; the reason appended to `bad`)."""
        tf, spec = self.target_from, self.spec
        if spec.target_shape is None and not skip:
            fast = self._class_indices([tf.text(m) for m in messages])
            if fast is not None:
                return fast
        out = []
        for j, m in enumerate(messages):
            if j in skip:
                out.append(None)
                continue
            try:
                out.append(check.parse_text_target(tf.text(m), tf.what, spec))
            except RecordError as exc:
                bad.append((j, str(exc)))
                out.append(None)
        return out

    def _class_indices(self, texts: list) -> list | None:
        """Every text a decimal class index in range (the common case, one pass): the indices; else None."""
        try:
            if not all(t.isdigit() and len(t) < 19 for t in texts):
                return None
            ys = list(map(int, texts))
        except (AttributeError, ValueError):  # a missing header (None), ...: one by one, with the reason
            return None
        return ys if max(ys) < self.spec.num_classes else None

    def assemble(self, arrays: list, ys: list, bad: list):
        rows = [j for j, y in enumerate(ys) if y is not None and arrays[j] is not None]
        bad.sort(key=lambda b: b[0])
        if not rows:
            return None, None, bad
        if len(rows) == len(arrays) and isinstance(arrays, np.ndarray):
            x = arrays.astype(np.float32)
        else:
            x = np.stack([arrays[j] for j in rows]).astype(np.float32, copy=False)
        return x, check.stack_targets([ys[j] for j in rows], self.spec), bad


class RawDecoder(_ValueDecoder):
    def __init__(self, fmt, spec) -> None:
        super().__init__(fmt, spec)
        self.message_bytes = self.payload

    def records(self, values, messages):
        n, p, spec = len(values), self.payload, self.spec
        bad: list = []
        lengths_ok = all(len(v) == p for v in values)
        skip = set()
        if not lengths_ok:
            for j, v in enumerate(values):
                if len(v) != p:
                    skip.add(j)
                    bad.append((j, f"bad_length: the value has {len(v)} bytes; must be {p} "
                                   f"({' x '.join(map(str, spec.shape))} {spec.dtype})"))
        ys = self.targets(messages, bad, skip)
        if lengths_ok:
            arrays = np.frombuffer(b"".join(values), self._le).reshape(n, *spec.shape)
        else:
            arrays = [None if j in skip else np.frombuffer(v, self._le).reshape(spec.shape)
                      for j, v in enumerate(values)]
        return self.assemble(arrays, ys, bad)


class NpyDecoder(_ValueDecoder):
    def __init__(self, fmt, spec) -> None:
        super().__init__(fmt, spec)
        self.message_bytes = self.payload + 128
        self._headers: dict[bytes, tuple | str] = {}

    def _header(self, value: bytes) -> tuple[int, np.dtype, bool] | str:
        """(the payload's offset, its dtype, Fortran order) of a .npy value, or the reason it is refused."""
        if len(value) < 10 or value[:6] != b"\x93NUMPY":
            return "bad_npy: not a .npy file (no \\x93NUMPY magic)"
        major = value[6]
        if major == 1:
            end = 10 + struct.unpack_from("<H", value, 8)[0]
        elif major in (2, 3) and len(value) >= 12:
            end = 12 + struct.unpack_from("<I", value, 8)[0]
        else:
            return f"bad_npy: format version {major} is not one of 1, 2, 3"
        if end > len(value):
            return "bad_npy: truncated header"
        head = bytes(value[:end])
        got = self._headers.get(head)
        if got is None:
            got = self._parse(head, major, end)
            if len(self._headers) >= _CACHE_MAX:
                self._headers.clear()
            self._headers[head] = got
        return got

    def _parse(self, head: bytes, major: int, end: int) -> tuple[int, np.dtype, bool] | str:
        import ast

        text_start = 10 if major == 1 else 12
        try:
            d = ast.literal_eval(head[text_start:].decode("latin1" if major < 3 else "utf-8"))
            dt = np.dtype(d["descr"]) if isinstance(d, dict) else None
            shape, fortran = tuple(d["shape"]), bool(d["fortran_order"])
        except Exception as exc:  # noqa: BLE001 - any malformed header
            return f"bad_npy: unreadable header ({type(exc).__name__})"
        if dt is None or dt.hasobject:
            return "bad_npy: an object array (pickled); refused"
        spec = self.spec
        if dt.kind != spec.dtype.kind or dt.itemsize != spec.dtype.itemsize or dt.fields is not None:
            return f"bad_npy: dtype {dt}; must be {spec.dtype}"
        if shape != spec.shape:
            return f"shape_mismatch: the array has shape {shape}; must be {spec.shape}"
        return end, dt, fortran

    def records(self, values, messages):
        spec, p = self.spec, self.payload
        bad: list = []
        arrays: list = []
        skip = set()
        for j, v in enumerate(values):
            h = self._header(v)
            if isinstance(h, str):
                bad.append((j, h))
            elif len(v) - h[0] != p:
                bad.append((j, f"bad_npy: {len(v) - h[0]} data bytes; must be {p}"))
            else:
                end, dt, fortran = h
                a = np.frombuffer(v, dt, offset=end)
                arrays.append(a.reshape(spec.shape, order="F" if fortran else "C"))
                continue
            skip.add(j)
            arrays.append(None)
        ys = self.targets(messages, bad, skip)
        return self.assemble(arrays, ys, bad)


def _spec(fmt):
    return with_dtype(fmt.spec, fmt.dtype) if fmt.dtype else fmt.spec


def raw_decoder(fmt) -> RawDecoder:
    """streams.format: raw (streams.dtype, streams.target_from, streams.target)."""
    return RawDecoder(fmt, _spec(fmt))


def npy_decoder(fmt) -> NpyDecoder:
    """streams.format: npy (streams.dtype, streams.target_from, streams.target)."""
    return NpyDecoder(fmt, _spec(fmt))
