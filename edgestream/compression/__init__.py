"""edgestream.compression — compressors and error-feedback memories (GRACE split); no communication.

See DESIGN.md and ALGORITHMS.md ("Compression", ScaDLES "Adaptive Top-k compression").
"""

from edgestream.compression.adaptive import (
    AdaptiveTopKCompressor,
    AdaptiveTopKState,
    cnc_ratio,
    compression_loss,
    compression_loss_reference,
    group_compress,
)
from edgestream.compression.base import (
    COMPRESSOR_NAMES,
    MEMORY_NAMES,
    Compressed,
    Compressor,
    Memory,
    build_compressor,
    build_memory,
    k_of,
    payload_nbytes,
    scatter_add_sparse,
    wire_floats,
)
from edgestream.compression.fp16 import FP16Compressor
from edgestream.compression.identity import NoneCompressor
from edgestream.compression.memory import DGCMemory, NoneMemory, ResidualMemory
from edgestream.compression.qsgd import QSGDCompressor
from edgestream.compression.randomk import RandomKCompressor
from edgestream.compression.topk import TopKCompressor, topk_tensor

__all__ = [
    "COMPRESSOR_NAMES",
    "MEMORY_NAMES",
    "AdaptiveTopKCompressor",
    "AdaptiveTopKState",
    "Compressed",
    "Compressor",
    "DGCMemory",
    "FP16Compressor",
    "Memory",
    "NoneCompressor",
    "NoneMemory",
    "QSGDCompressor",
    "RandomKCompressor",
    "ResidualMemory",
    "TopKCompressor",
    "build_compressor",
    "build_memory",
    "cnc_ratio",
    "compression_loss",
    "compression_loss_reference",
    "group_compress",
    "k_of",
    "payload_nbytes",
    "scatter_add_sparse",
    "topk_tensor",
    "wire_floats",
]
