"""Record formats (issue 33): how the messages of a stream an edge device writes itself become samples.

    from edgestream.data.records import RecordFormat, build_decoder
    decoder = build_decoder(RecordFormat("json", spec, input="reading.values", target="label"))
    batch, rejected = decoder.decode(messages, DeviceRule(device, num_devices))   # SampleSerde.decode's contract

`streams.format` names a decoder through `edgestream.plugins.DECODERS`: a built-in (``edgestream``,
``json``, ``avro``, ``raw``, ``npy``), an import path ``"pkg.mod:factory"`` or an entry point of the group
``edgestream.decoders``. A factory is called as ``factory(fmt: RecordFormat)`` and returns a decoder: an
object with `spec` (a SampleSpec), `normalize` (None), `message_bytes` (int or None) and
``decode(messages, rule, device=None) -> (DecodedBatch | None, [(index, reason)])`` -- most simply a
`RecordDecoder` subclass that overrides ``record(value, message) -> (x, target)``.
See docs/record-formats.md.
"""

from __future__ import annotations

from edgestream.data.records.base import RecordDecoder, RecordError
from edgestream.data.records.format import DECODER_FIELDS, Fields, RecordFormat, check_fields, fields_of, takes

#: what a decoder must have (checked on what a factory returns)
DECODER_ATTRS = ("spec", "normalize", "message_bytes", "decode")


def build_decoder(fmt: RecordFormat):
    """The decoder of `fmt`: its factory resolved through plugins.DECODERS (field streams.format), its
    fields checked (a built-in's DECODER_FIELDS), then ``factory(fmt)``. ValueError, one line naming the
    field, for a configuration it cannot decode."""
    from edgestream.plugins import DECODERS, PluginError

    factory = DECODERS.load(fmt.name, "streams.format")
    check_fields(fmt, fields_of(fmt.name, factory))
    try:
        decoder = factory(fmt)
    except ValueError as exc:
        text = " ".join(str(exc).split())
        if isinstance(exc, PluginError) or text.startswith("streams."):
            raise ValueError(text) from None
        raise ValueError(f"streams.format: decoder {fmt.name!r} refused the configuration: {text}") from None
    except Exception as exc:  # noqa: BLE001 - a user's factory may raise anything; one line
        detail = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"streams.format: decoder factory {fmt.name!r} raised {type(exc).__name__}: {detail}") \
            from None
    missing = [a for a in DECODER_ATTRS if not hasattr(decoder, a)]
    if missing or not callable(getattr(decoder, "decode", None)):
        raise ValueError(f"streams.format: {fmt.name!r} returned a {type(decoder).__name__} without "
                         f"{', '.join(missing) or 'a callable decode'}; a decoder needs {', '.join(DECODER_ATTRS)} "
                         "(subclass edgestream.data.records.RecordDecoder)")
    return decoder


__all__ = ["DECODER_ATTRS", "DECODER_FIELDS", "Fields", "RecordDecoder", "RecordError", "RecordFormat",
           "build_decoder", "check_fields", "takes"]
