"""The built-in compressors as factories factory(spec) -> Compressor: registered in
edgestream.plugins.COMPRESSORS through the same mechanism as a user's compressor (docs/extending.md)."""

from __future__ import annotations

from typing import Any

from edgestream.compression.base import Compressor


def none(spec: dict[str, Any]) -> Compressor:
    from edgestream.compression.identity import NoneCompressor

    return NoneCompressor()


def fp16(spec: dict[str, Any]) -> Compressor:
    from edgestream.compression.fp16 import FP16Compressor

    return FP16Compressor()


def topk(spec: dict[str, Any]) -> Compressor:
    from edgestream.compression.topk import TopKCompressor

    return TopKCompressor(float(spec.get("ratio", 0.1)))


def randomk(spec: dict[str, Any]) -> Compressor:
    from edgestream.compression.randomk import RandomKCompressor

    return RandomKCompressor(float(spec.get("ratio", 0.1)), seed=int(spec.get("seed", 0)))


def qsgd(spec: dict[str, Any]) -> Compressor:
    from edgestream.compression.qsgd import QSGDCompressor

    return QSGDCompressor(levels=int(spec.get("levels", 256)), seed=int(spec.get("seed", 0)))


def adaptive_topk(spec: dict[str, Any]) -> Compressor:
    from edgestream.compression.adaptive import AdaptiveTopKCompressor

    return AdaptiveTopKCompressor(float(spec.get("ratio", 0.1)), delta=float(spec.get("delta", 0.3)),
                                  statistic=spec.get("statistic", "ewma"), beta=float(spec.get("beta", 0.9)))
