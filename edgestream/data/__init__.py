"""edgestream.data — datasets, partitioners and the wire format of one streamed sample (see DESIGN.md).

Knows nothing about Kafka. A run's samples go through one `SampleSerde` (edgestream.data.serde):
producers encode with it, consumers validate and decode with it, restart scans and the DLQ read
headers with it; both sides load the same `Dataset` via `load_dataset`. Dataset names resolve through
`edgestream.plugins.DATASETS` (built-ins: edgestream.data.formats).
"""

from edgestream.lazy import lazy_exports

#: public name -> the module that defines it (loaded on first use: a producer reads datasets without torch)
_EXPORTS = {
    "RestrictedUnpickler": "edgestream.data.cifar",
    "RestrictedUnpicklingError": "edgestream.data.cifar",
    "restricted_load": "edgestream.data.cifar",
    "Dataset": "edgestream.data.datasets",
    "channel_stats": "edgestream.data.datasets",
    "load_dataset": "edgestream.data.datasets",
    "SCHEMES": "edgestream.data.partition",
    "partition_indices": "edgestream.data.partition",
    "DecodedBatch": "edgestream.data.serde",
    "SampleHeader": "edgestream.data.serde",
    "SampleSerde": "edgestream.data.serde",
    "DeviceRule": "edgestream.data.validate",
    "SampleSpec": "edgestream.data.validate",
    "DTYPE_CODES": "edgestream.data.wire",
    "HEADER": "edgestream.data.wire",
    "HEADER_SIZE": "edgestream.data.wire",
    "REASONS": "edgestream.data.wire",
    "Affine": "edgestream.data.wire",
    "Sample": "edgestream.data.wire",
    "SampleEncoder": "edgestream.data.wire",
    "WireError": "edgestream.data.wire",
    "decode_batch": "edgestream.data.wire",
    "decode_sample": "edgestream.data.wire",
    "encode_sample": "edgestream.data.wire",
    "split_valid": "edgestream.data.wire",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
