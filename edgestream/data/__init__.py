"""edgestream.data — datasets, partitioners and the wire format of one streamed sample (see DESIGN.md).

Knows nothing about Kafka. A run's samples go through one `SampleSerde` (edgestream.data.serde):
producers encode with it, consumers validate and decode with it, restart scans and the DLQ read
headers with it; both sides load the same `Dataset` via `load_dataset`. Dataset names resolve through
`edgestream.plugins.DATASETS` (built-ins: edgestream.data.formats).
"""

from edgestream.data.cifar import RestrictedUnpickler, RestrictedUnpicklingError, restricted_load
from edgestream.data.datasets import Dataset, channel_stats, load_dataset
from edgestream.data.partition import SCHEMES, partition_indices
from edgestream.data.serde import DecodedBatch, SampleHeader, SampleSerde
from edgestream.data.validate import DeviceRule, SampleSpec
from edgestream.data.wire import (
    DTYPE_CODES,
    HEADER,
    HEADER_SIZE,
    REASONS,
    Affine,
    Sample,
    SampleEncoder,
    WireError,
    decode_batch,
    decode_sample,
    encode_sample,
    split_valid,
)

__all__ = [
    "DTYPE_CODES", "HEADER", "HEADER_SIZE", "REASONS", "SCHEMES", "Affine", "Dataset", "DecodedBatch",
    "DeviceRule", "RestrictedUnpickler", "RestrictedUnpicklingError", "Sample", "SampleEncoder", "SampleHeader",
    "SampleSerde", "SampleSpec", "WireError",
    "channel_stats", "decode_batch", "decode_sample", "encode_sample", "load_dataset", "partition_indices",
    "restricted_load", "split_valid",
]
