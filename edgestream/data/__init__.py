"""edgestream.data — datasets, partitioners and the wire format of one streamed sample (see DESIGN.md).

Knows nothing about Kafka: producers encode with `encode_sample`, consumers decode with
`decode_batch` / `split_valid`, and both load the same `Dataset` via `load_dataset`.
"""

from edgestream.data.cifar import RestrictedUnpickler, RestrictedUnpicklingError, restricted_load
from edgestream.data.datasets import DATASETS, Dataset, channel_stats, load_dataset
from edgestream.data.partition import SCHEMES, partition_indices
from edgestream.data.wire import (
    DTYPE_CODES,
    HEADER,
    HEADER_SIZE,
    REASONS,
    Sample,
    SampleEncoder,
    WireError,
    decode_batch,
    decode_sample,
    encode_sample,
    split_valid,
)

__all__ = [
    "DATASETS", "DTYPE_CODES", "HEADER", "HEADER_SIZE", "REASONS", "SCHEMES", "Dataset",
    "RestrictedUnpickler", "RestrictedUnpicklingError", "Sample", "SampleEncoder", "WireError",
    "channel_stats", "decode_batch", "decode_sample", "encode_sample", "load_dataset", "partition_indices",
    "restricted_load", "split_valid",
]
