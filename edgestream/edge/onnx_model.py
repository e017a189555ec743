"""A model version made runnable: its ONNX graph in an ONNX Runtime session, checked against its metadata
(numpy and onnxruntime only; no torch). `Runnable.of(version)` raises `NotRunnable` (one line) for a version it
cannot run: no model.onnx (a model published as safetensors only), a graph ONNX Runtime refuses, or a graph
whose input is not what the metadata says the records are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from edgestream.edge.model_format import ONNX_FILE, ModelVersion

#: ONNX Runtime's element types -> numpy dtypes (the input types a version may declare)
_ORT_TYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
              "tensor(uint8)": "uint8", "tensor(int8)": "int8", "tensor(int16)": "int16", "tensor(uint16)": "uint16",
              "tensor(int32)": "int32", "tensor(uint32)": "uint32", "tensor(int64)": "int64"}


class NotRunnable(ValueError):
    """A version this reader cannot run; str() is the one-line reason."""


@dataclass
class Runnable:
    """A checked version with its ONNX Runtime session: `outputs(x)` the model's outputs (logits or values),
    `predict(x)` class indices (classification) or values (regression)."""

    version: ModelVersion
    session: Any
    input_name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    labels: bool

    @classmethod
    def of(cls, version: ModelVersion, providers: list[str] | None = None) -> Runnable:
        import onnxruntime as ort

        v, meta = version.version, version.meta
        graph = version.files.get(ONNX_FILE)
        if graph is None:
            why = meta.get("onnx_error") or "it was published without one"
            raise NotRunnable(f"version {v}: no {ONNX_FILE} to run ({why})")
        spec = meta.get("input") if isinstance(meta.get("input"), dict) else {}
        try:
            dtype, shape = np.dtype(spec["dtype"]), tuple(int(s) for s in spec["shape"])
        except (KeyError, TypeError, ValueError):
            raise NotRunnable(f"version {v}: metadata input {str(spec)[:80]} does not give a dtype and a shape") \
                from None
        try:
            opts = ort.SessionOptions()
            opts.log_severity_level = 3
            session = ort.InferenceSession(graph, opts, providers=providers or ["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types for a graph it refuses
            raise NotRunnable(f"version {v}: ONNX Runtime cannot load {ONNX_FILE}: "
                              f"{' '.join(str(exc).split())[:200]}") from None
        inputs = session.get_inputs()
        if len(inputs) != 1:
            raise NotRunnable(f"version {v}: the graph takes {len(inputs)} inputs; a version has one")
        got = inputs[0]
        if _ORT_TYPES.get(got.type) != dtype.name:
            raise NotRunnable(f"version {v}: the graph's input is {got.type}, the metadata says {dtype.name}")
        dims = list(got.shape)
        if len(dims) != len(shape) + 1 or any(isinstance(d, int) and d != s for d, s in zip(dims[1:], shape,
                                                                                             strict=True)):
            want = ", ".join(map(str, shape))
            raise NotRunnable(f"version {v}: the graph's input shape {dims} is not (batch, {want})")
        return cls(version, session, got.name, dtype, shape, str(meta.get("task")) == "classification")

    def batch(self, x: Any) -> np.ndarray:
        """`x` as a batch of this version's input: one sample (the input shape) or a batch of them, in its dtype.
        ValueError naming what is allowed."""
        a = np.asarray(x)
        if a.shape == self.shape:
            a = a[None]
        if a.shape[1:] != self.shape:
            raise ValueError(f"x: shape {a.shape} is not allowed; version {self.version.version} takes "
                             f"{self.shape} or (batch, {', '.join(map(str, self.shape))})")
        if a.dtype != self.dtype:
            if not np.can_cast(a.dtype, self.dtype, "same_kind"):
                raise ValueError(f"x: dtype {a.dtype} is not allowed; version {self.version.version} takes "
                                 f"{self.dtype}")
            a = a.astype(self.dtype)
        return np.ascontiguousarray(a)

    def outputs(self, x: Any) -> np.ndarray:
        return self.session.run(None, {self.input_name: self.batch(x)})[0]

    def decide(self, out: np.ndarray) -> np.ndarray:
        """Outputs -> predictions: the arg-max class (classification) or the values (regression)."""
        return out.argmax(axis=1) if self.labels else out

    def predict(self, x: Any) -> np.ndarray:
        return self.decide(self.outputs(x))
