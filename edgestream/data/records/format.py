"""What a record decoder is built from (`RecordFormat`: the ``streams.*`` fields and the run's `SampleSpec`)
and which of those fields each built-in takes and needs (`DECODER_FIELDS`, read by the config checks too).

A built-in refuses a field it does not take and one it needs but misses, with one line naming the field:
``streams.input: required for format 'json' (the record's field holding the input)``. A user's decoder
takes every field unless its factory says otherwise with the `takes` decorator (as `edgestream.data.formats`
marks datasets).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from edgestream.data.validate import SampleSpec

#: the streams.* fields a decoder may read (besides the format's name and the spec)
FIELDS = ("input", "target", "target_from", "schema", "dtype", "options")


class Fields(NamedTuple):
    """The streams.* fields a format takes (any other given one is refused) and the ones it needs."""

    takes: tuple[str, ...]
    requires: tuple[str, ...] = ()


#: built-in format -> the streams.* fields it takes / needs
DECODER_FIELDS: dict[str, Fields] = {
    "edgestream": Fields(("dtype",)),
    "json": Fields(("input", "target"), ("input", "target")),
    "avro": Fields(("input", "target", "schema", "options"), ("input", "target", "schema")),
    "raw": Fields(("target", "target_from", "dtype")),
    "npy": Fields(("target", "target_from", "dtype")),
}

#: what a missing field is, for the 'required' line
_WHAT = {"input": "the record's field holding the input", "target": "the record's field holding the target",
         "schema": "the .avsc file of the records' Avro schema"}


@dataclass(frozen=True)
class RecordFormat:
    """One stream's record format: `name` is the streams.format value (a built-in, an import path
    ``pkg.mod:factory`` or an entry point of the group ``edgestream.decoders``); `spec` the run's samples
    (dtype: the wire's for raw/edgestream/npy, float32 for json/avro; shape; the target); the other fields
    as configured (`schema` an absolute path); `keyed`: one shared topic, the message key names the device."""

    name: str
    spec: SampleSpec
    input: str | None = None
    target: str | None = None
    target_from: str | None = None
    schema: str | None = None
    dtype: str | None = None
    options: dict = field(default_factory=dict)
    keyed: bool = False

    def given(self) -> list[str]:
        """The optional fields set (not None, not empty)."""
        return [f for f in FIELDS if getattr(self, f) not in (None, "", {}, [])]


def takes(*fields: str, requires: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Mark a decoder factory with the streams.* fields it takes and needs (checked before it is called)."""

    def mark(fn: Callable) -> Callable:
        fn.takes, fn.requires = tuple(fields), tuple(requires)  # type: ignore[attr-defined]
        return fn

    return mark


def check_fields(fmt: RecordFormat, fields: Fields) -> None:
    """ValueError (one line naming the field) when `fmt` gives a field outside `fields.takes` or lacks one
    of `fields.requires`."""
    for f in fmt.given():
        if f not in fields.takes:
            allowed = ", ".join(fields.takes) or "none of " + ", ".join(FIELDS)
            raise ValueError(f"streams.{f}: format {fmt.name!r} does not take it (it takes {allowed})")
    for f in fields.requires:
        if getattr(fmt, f) in (None, ""):
            raise ValueError(f"streams.{f}: required for format {fmt.name!r} ({_WHAT.get(f, 'see the docs')})")


def fields_of(name: str, factory: Any) -> Fields:
    """The fields a format takes: a built-in's DECODER_FIELDS, a marked factory's own, else every field."""
    if name in DECODER_FIELDS:
        return DECODER_FIELDS[name]
    return Fields(tuple(getattr(factory, "takes", FIELDS)), tuple(getattr(factory, "requires", ())))
