"""edgestream.compression — compressors and error-feedback memories (GRACE split); no communication.

See DESIGN.md and ALGORITHMS.md ("Compression", ScaDLES "Adaptive Top-k compression").
"""

from edgestream.lazy import lazy_exports

#: public name -> the module that defines it (loaded on first use: a config's names need no torch)
_EXPORTS = {
    "AdaptiveTopKCompressor": "edgestream.compression.adaptive",
    "AdaptiveTopKState": "edgestream.compression.adaptive",
    "cnc_ratio": "edgestream.compression.adaptive",
    "compression_loss": "edgestream.compression.adaptive",
    "compression_loss_reference": "edgestream.compression.adaptive",
    "group_compress": "edgestream.compression.adaptive",
    "COMPRESSOR_NAMES": "edgestream.compression.base",
    "MEMORY_NAMES": "edgestream.compression.base",
    "Compressed": "edgestream.compression.base",
    "Compressor": "edgestream.compression.base",
    "Memory": "edgestream.compression.base",
    "build_compressor": "edgestream.compression.base",
    "k_of": "edgestream.compression.base",
    "payload_nbytes": "edgestream.compression.base",
    "scatter_add_sparse": "edgestream.compression.base",
    "wire_floats": "edgestream.compression.base",
    "FP16Compressor": "edgestream.compression.fp16",
    "NoneCompressor": "edgestream.compression.identity",
    "DGCMemory": "edgestream.compression.error_feedback",
    "build_memory": "edgestream.compression.error_feedback",
    "NoneMemory": "edgestream.compression.error_feedback",
    "ResidualMemory": "edgestream.compression.error_feedback",
    "QSGDCompressor": "edgestream.compression.qsgd",
    "RandomKCompressor": "edgestream.compression.randomk",
    "TopKCompressor": "edgestream.compression.topk",
    "topk_tensor": "edgestream.compression.topk",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
