"""The `streams:` section of an experiment config: where a real run's samples come from.

    streams:
      source: internal             # internal (default): edgestream's producer replays data.dataset into the
                                   #   run's own topics; external: topics the run did not create, no producer
      topic: plant.sensor-{device} # external: one topic per device ({device} = 0..devices.count-1, one
                                   #   partition each), or ONE topic without {device}: the message key is the
                                   #   device id in decimal, and `partitioner` says which partition holds it
      partitioner: consistent      # one keyed topic: consistent (librdkafka's and confluent-kafka's default:
                                   #   CRC-32 of the key), murmur2 (the Java client's default), modulo (d % P)
      start: earliest              # where a new run begins: earliest, latest, an ISO-8601 time or unix ms
                                   #   (a resumed run continues at its checkpointed offsets)
      format: json                 # a record decoder (edgestream.plugins.DECODERS): edgestream, json, avro,
                                   #   raw, npy, or a user's "pkg.mod:factory" / entry point
      input: v                     # json/avro: the input's field; target: the target's field (raw/npy: the
      target: cls                  #   header holding it); target_from (raw/npy): header or key; schema
                                   #   (avro): an .avsc file; dtype (raw/edgestream): the values' dtype;
                                   #   options: a user decoder's own

Which fields a format takes is its decoder's (edgestream.data.records.DECODER_FIELDS); a field it does not
take is refused with one line. The inputs' shape and the targets come from `data` (shape, num_classes or
task: regression with target_dim), checked against every record.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from edgestream.config.base import Int, _Model

SOURCES = ("internal", "external")
PARTITIONERS = ("consistent", "murmur2", "modulo")
#: a Kafka topic name: letters, digits, '.', '_', '-', at most 249 characters
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")
#: the fields of a format (the ones a decoder may take)
FORMAT_FIELDS = ("input", "target", "target_from", "schema", "dtype", "options")


def parse_start(value: str | int | None) -> str | int:
    """streams.start as 'earliest', 'latest' or unix milliseconds; ValueError (one line) otherwise."""
    if value is None:
        return "earliest"
    if isinstance(value, bool):
        raise ValueError("must be earliest, latest, an ISO-8601 time or unix milliseconds, not true/false")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must be >= 0 (unix milliseconds)")
        return value
    text = str(value).strip()
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError("must be earliest, latest, an ISO-8601 time (2026-11-26T10:00:00Z) or unix "
                         "milliseconds") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


class StreamsConfig(_Model):
    source: Literal["internal", "external"] = "internal"
    topic: str | None = None
    partitioner: Literal["consistent", "murmur2", "modulo"] | None = None
    start: str | Int | None = None
    format: str | None = None
    input: str | None = Field(None, min_length=1)
    target: str | None = Field(None, min_length=1)
    target_from: Literal["header", "key"] | None = None
    schema_: str | None = Field(None, alias="schema", min_length=1)
    dtype: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, serialize_by_alias=True, validate_by_name=True)

    @field_validator("topic")
    @classmethod
    def _topic(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if v.count("{device}") > 1:
            raise ValueError(f"{v!r} is not allowed; {{device}} may appear once")
        if not TOPIC_NAME.match(v.replace("{device}", "0")):
            raise ValueError(f"{v!r} is not a Kafka topic name (letters, digits, '.', '_', '-'; {{device}} "
                             "for the device id)")
        return v

    @field_validator("start", mode="before")
    @classmethod
    def _start_time(cls, v: Any) -> Any:
        # YAML reads an unquoted ISO time (start: 2026-11-26T10:00:00Z, or --set streams.start=...) as a
        # datetime / date: its ISO text (no zone = UTC, as for the string)
        return v.isoformat() if isinstance(v, date) else v

    @field_validator("start")
    @classmethod
    def _start(cls, v: str | int | None) -> str | int | None:
        return None if v is None else parse_start(v)

    @model_validator(mode="after")
    def _fields(self) -> StreamsConfig:
        given = sorted(k for k in ("topic", "partitioner", "start", "format", *FORMAT_FIELDS)
                       if (getattr(self, "schema_" if k == "schema" else k) not in (None, {})))
        if self.source == "internal":
            if given:
                raise ValueError(f"{given[0]}: only external streams take it (set streams.source: external); "
                                 "internal streams are edgestream's producer replaying data.dataset")
            return self
        if self.topic is None:
            raise ValueError("topic: required for external streams: one topic per device "
                             "(\"plant.sensor-{device}\") or one topic keyed by the device id")
        if self.partitioner is not None and self.per_device:
            raise ValueError("partitioner: applies to one keyed topic only; a topic per device ({device} in "
                             "streams.topic) has one partition")
        if self.format is None:
            self.format = "edgestream"
        from edgestream.plugins import DECODERS

        if self.format not in DECODERS.builtins:
            try:
                DECODERS.load(self.format)
            except ValueError as exc:
                raise ValueError(f"format: {exc}") from None
        return self

    @property
    def external(self) -> bool:
        return self.source == "external"

    @property
    def per_device(self) -> bool:
        """External: one topic per device (the pattern holds {device}); else one keyed topic."""
        return self.topic is not None and "{device}" in self.topic

    @property
    def start_at(self) -> str | int:
        """'earliest', 'latest' or unix milliseconds."""
        return parse_start(self.start)

    def format_fields(self) -> dict[str, Any]:
        """The format's fields as given (None and an empty options left out)."""
        out = {k: getattr(self, "schema_" if k == "schema" else k) for k in FORMAT_FIELDS}
        return {k: v for k, v in out.items() if v not in (None, {})}
