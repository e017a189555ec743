"""The decoders of records that parse to objects with named fields (JSON, Avro): `input` and `target` name
the fields, a dotted path (``a.b``) reaching into nested objects. A batch whose records are all well-formed
is converted with one numpy call for the inputs and one for the targets; otherwise each record is checked
on its own and a bad one gets a reason naming the field."""

from __future__ import annotations

from typing import Any

import numpy as np

from edgestream.data.records import values as check
from edgestream.data.records.base import RecordDecoder, RecordError

_MISSING = object()


class FieldPath:
    """A dotted path into nested objects: ``"reading.values"``; a key that itself holds the dots wins."""

    def __init__(self, path: str, role: str) -> None:
        self.path, self.role = path, role
        self.parts = tuple(path.split("."))
        self.what = f"{role} {path!r}"

    def get(self, obj: dict) -> Any:
        """The value at the path (_MISSING when absent); AttributeError when `obj` is no object."""
        v = obj.get(self.path, _MISSING)
        if v is not _MISSING or len(self.parts) == 1:
            return v
        v = obj
        for p in self.parts:
            if not isinstance(v, dict):
                return _MISSING
            v = v.get(p, _MISSING)
            if v is _MISSING:
                break
        return v

    def need(self, obj: dict) -> Any:
        v = self.get(obj)
        if v is _MISSING:
            raise RecordError("missing_field", f"{self.what} not in the record")
        return v


class ObjectDecoder(RecordDecoder):
    """A record -> an object (`parse`, raising RecordError) -> its input and target fields."""

    #: the reason code of a record that does not parse
    parse_code = "decode_error"

    def __init__(self, fmt, spec=None) -> None:
        super().__init__(fmt, spec)
        self.input = FieldPath(fmt.input, "input")
        self.target = FieldPath(fmt.target, "target")

    def parse(self, value: bytes) -> Any:
        raise NotImplementedError

    def parse_all(self, values: list[bytes]) -> list:
        """Every value parsed (a RecordError in place of one that does not parse)."""
        out = []
        for v in values:
            try:
                out.append(self.parse(v))
            except RecordError as exc:
                out.append(exc)
        return out

    def records(self, values, messages):
        objs = self.parse_all(values)
        fast = self._fast(objs)
        if fast is not None:
            return fast[0], fast[1], []
        xs, ys, bad = [], [], []
        shape, spec = self.spec.shape, self.spec
        for j, o in enumerate(objs):
            try:
                if isinstance(o, RecordError):
                    raise o
                if not isinstance(o, dict):
                    raise RecordError(self.parse_code, f"the record is {check.kind_of(o)}, not an object")
                x = check.as_input(self.input.need(o), self.input.what, shape)
                y = check.as_target(self.target.need(o), self.target.what, spec)
            except RecordError as exc:
                bad.append((j, str(exc)))
                continue
            xs.append(x)
            ys.append(y)
        if not xs:
            return None, None, bad
        return np.stack(xs).astype(np.float32, copy=False), check.stack_targets(ys, spec), bad

    def _fast(self, objs: list) -> tuple[np.ndarray, np.ndarray] | None:
        """(x, targets) when every record is an object with well-formed fields; None otherwise."""
        try:
            ins, tgs = self.input.get, self.target.get
            xs = [ins(o) for o in objs]
            ys = [tgs(o) for o in objs]
        except (AttributeError, TypeError):  # a record that is not an object, or an error in its place
            return None
        x = check.batch_inputs(xs, self.spec.shape)
        if x is None:
            return None
        y = check.batch_targets(ys, self.spec)
        if y is None:
            return None
        return x, y
