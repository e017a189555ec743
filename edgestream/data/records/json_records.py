"""The ``json`` record format: each message value is one JSON object; `input` and `target` name its fields
(dotted paths reach into nested objects). Parsed with orjson (strict JSON: NaN / Infinity literals are
refused as bad_json). A value that is not JSON: ``bad_json: ...``; JSON that is not an object:
``bad_json: the record is a list, not an object``."""

from __future__ import annotations

import math

from edgestream.data.records.base import RecordError, with_dtype
from edgestream.data.records.objects import ObjectDecoder

try:
    from orjson import JSONDecodeError as _Error
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a dependency; the stdlib parses the same, slower
    from json import JSONDecodeError as _Error
    from json import loads as _loads


class JsonDecoder(ObjectDecoder):
    parse_code = "bad_json"

    def __init__(self, fmt, spec=None) -> None:
        super().__init__(fmt, spec)
        # about 10 characters a value, the field names and the target
        self.message_bytes = 10 * math.prod(self.spec.shape) + len(fmt.input) + len(fmt.target) + 24

    def parse(self, value: bytes):
        try:
            return _loads(value)
        except (_Error, ValueError, TypeError) as exc:
            detail = " ".join(str(exc).split())[:120] if value else "an empty value"
            raise RecordError("bad_json", f"not JSON ({detail})") from None

    def parse_all(self, values):
        try:
            return [_loads(v) for v in values]  # the common case: every value parses
        except (_Error, ValueError, TypeError):
            return super().parse_all(values)


def json_decoder(fmt) -> JsonDecoder:
    """streams.format: json (streams.input, streams.target)."""
    return JsonDecoder(fmt, with_dtype(fmt.spec, "float32"))
