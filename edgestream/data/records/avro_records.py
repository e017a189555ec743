"""The ``avro`` record format: each message value is one record in Avro's binary encoding without a
schema (fastavro.schemaless_reader), written with the schema in `streams.schema` (an .avsc file, read and
parsed once when the decoder is built); `input` and `target` name its fields as for JSON.
``options: {framing: confluent}``: the values carry Confluent Schema Registry framing (a magic byte 0 and a
4-byte schema id before the body; the id is not looked up -- the .avsc is the writer's schema;
``schema_id: N`` checks it). A value that does not decode: ``bad_avro: ...``."""

from __future__ import annotations

import io
import json
import math
import struct

from edgestream.data.records.base import RecordError, with_dtype
from edgestream.data.records.objects import ObjectDecoder

OPTIONS = ("framing", "schema_id")
FRAMINGS = ("plain", "confluent")


def load_schema(path: str | None):
    """The parsed schema of an .avsc file; ValueError (one line naming streams.schema) when it is not one."""
    import fastavro

    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError, TypeError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise ValueError(f"streams.schema: cannot read {path!r} as a JSON Avro schema ({type(exc).__name__}: "
                         f"{detail})") from None
    try:
        return fastavro.parse_schema(raw)
    except Exception as exc:  # noqa: BLE001 - fastavro's SchemaParseException and friends
        detail = " ".join(str(exc).split())[:200]
        raise ValueError(f"streams.schema: {path!r} is not a valid Avro schema ({type(exc).__name__}: "
                         f"{detail})") from None


def _record_fields(t) -> list[dict] | None:
    """The fields of an Avro record type (also inside a union, e.g. ["null", {record}]); None otherwise."""
    if isinstance(t, dict) and t.get("type") == "record":
        return t.get("fields", [])
    if isinstance(t, list):
        recs = [x for x in t if isinstance(x, dict) and x.get("type") == "record"]
        if len(recs) == 1:
            return recs[0].get("fields", [])
    return None


def check_path(schema, path: str, field: str) -> None:
    """ValueError naming `field` when `path` (dotted) is not a field of the schema's records."""
    fields = _record_fields(schema)
    if fields is None:
        raise ValueError(f"streams.schema: the schema's top level is not a record (it is {schema.get('type')!r})"
                         if isinstance(schema, dict) else "streams.schema: the schema's top level is not a record")
    names = [f["name"] for f in fields]
    if path in names:
        return
    parts = path.split(".")
    for depth, part in enumerate(parts):
        names = [f["name"] for f in fields]
        match = [f for f in fields if f["name"] == part]
        if not match:
            where = "the schema's" if depth == 0 else f"record {'.'.join(parts[:depth])!r}'s"
            raise ValueError(f"{field}: {path!r} is not a field of the Avro schema ({where} fields: "
                             f"{', '.join(names) or 'none'})")
        if depth < len(parts) - 1:
            fields = _record_fields(match[0]["type"])
            if fields is None:  # a named type's reference, or no record: the records tell
                return


class AvroDecoder(ObjectDecoder):
    parse_code = "bad_avro"

    def __init__(self, fmt, spec=None) -> None:
        super().__init__(fmt, spec)
        opts = dict(fmt.options or {})
        for k in opts:
            if k not in OPTIONS:
                raise ValueError(f"streams.options: format 'avro' does not take {k!r} (it takes {', '.join(OPTIONS)})")
        framing = opts.get("framing", "plain")
        if framing not in FRAMINGS:
            raise ValueError(f"streams.options: framing {framing!r} is not allowed; must be one of "
                             f"{', '.join(FRAMINGS)}")
        sid = opts.get("schema_id")
        if sid is not None and (isinstance(sid, bool) or not isinstance(sid, int) or not 0 <= sid < 2**32):
            raise ValueError(f"streams.options: schema_id {sid!r} is not allowed; must be an integer in [0, 2^32)")
        if sid is not None and framing != "confluent":
            raise ValueError("streams.options: schema_id needs framing: confluent")
        self.confluent, self.schema_id = framing == "confluent", sid
        self.schema = load_schema(fmt.schema)
        check_path(self.schema, fmt.input, "streams.input")
        check_path(self.schema, fmt.target, "streams.target")
        from fastavro import schemaless_reader

        self._read = schemaless_reader
        self.message_bytes = 4 * math.prod(self.spec.shape) + 16 + (5 if self.confluent else 0)

    def parse(self, value: bytes):
        start = 0
        if self.confluent:
            if len(value) < 5 or value[0] != 0:
                raise RecordError("bad_avro", "no Confluent framing (a magic byte 0 and a 4-byte schema id)")
            if self.schema_id is not None:
                (sid,) = struct.unpack_from(">I", value, 1)
                if sid != self.schema_id:
                    raise RecordError("bad_avro", f"schema id {sid}; must be {self.schema_id}")
            start = 5
        buf = io.BytesIO(value)
        buf.seek(start)
        try:
            obj = self._read(buf, self.schema, None)
        except Exception as exc:  # noqa: BLE001 - fastavro raises EOFError, ValueError, UnicodeDecodeError, ...
            detail = " ".join(str(exc).split())[:120] or "truncated"
            raise RecordError("bad_avro", f"does not decode with streams.schema ({type(exc).__name__}: "
                              f"{detail})") from None
        if buf.tell() != len(value):
            raise RecordError("bad_avro", f"{len(value) - buf.tell()} byte(s) after the record (another schema?)")
        return obj


def avro_decoder(fmt) -> AvroDecoder:
    """streams.format: avro (streams.schema, streams.input, streams.target, streams.options)."""
    return AvroDecoder(fmt, with_dtype(fmt.spec, "float32"))
