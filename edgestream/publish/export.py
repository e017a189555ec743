"""A torch model -> the files of a model version (docs/model-format.md): `model.onnx` and `model.safetensors`.

ONNX (opset OPSET, torch's TorchScript-based exporter): the graph takes the records as they arrive -- the
input dtype and shape the run's records have, a dynamic batch axis 0, named "input" -- and applies the
trainer's normalisation itself (x * scale[c] + bias[c] per channel c, in float32, as the consumer does), then
the model in eval mode; its output "output" is (batch, outputs): logits (classification) or values
(regression). Each export is checked: ONNX Runtime runs it on CHECK_BATCH random records and its outputs must
match torch's within |onnx - torch| <= ATOL + RTOL * |torch| (else the export counts as failed). A model that
cannot be exported (or fails the check) gets `onnx_error`, one line, and its version carries safetensors only.

safetensors: the model's state_dict (parameters and buffers, on the CPU, contiguous), metadata
{"format": "edgestream.model", "version": "<N>"}. The weights are the model's own: the normalisation is not in
them (the metadata's input.normalization says it).
"""

from __future__ import annotations

import contextlib
import copy
import io
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

OPSET = 17
#: the check of an export: tolerances and the batch of random records
ATOL, RTOL = 1e-4, 1e-3
CHECK_BATCH = 3


@dataclass
class Exported:
    files: dict[str, bytes] = field(default_factory=dict)
    onnx: dict[str, Any] | None = None   # {"opset", "input", "output", "batch_axis", "check": {...}}
    onnx_error: str | None = None


class _OnRecords(nn.Module):
    """The model behind the trainer's input path: the record dtype cast to float32, then scale and bias."""

    def __init__(self, model: nn.Module, shape: tuple[int, ...], norm: dict[str, Any] | None) -> None:
        super().__init__()
        self.model = model
        self.norm = norm is not None
        if norm is not None:
            c = len(norm["scale"])
            view = (1, c, *([1] * (len(shape) - 1))) if c > 1 else (1,) * (len(shape) + 1)
            self.register_buffer("scale", torch.tensor(norm["scale"], dtype=torch.float32).reshape(view))
            self.register_buffer("bias", torch.tensor(norm["bias"], dtype=torch.float32).reshape(view))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.float32)
        if self.norm:
            x = x * self.scale + self.bias
        return self.model(x)


def _records(shape: tuple[int, ...], dtype: np.dtype, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype.kind in "ui":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -128), min(info.max, 255) + 1, size=(n, *shape)).astype(dtype)
    return rng.standard_normal((n, *shape)).astype(dtype)


def safetensors_bytes(model: nn.Module, version: int) -> bytes:
    from safetensors.torch import save

    state = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    return save(state, metadata={"format": "edgestream.model", "version": str(int(version))})


def onnx_bytes(model: nn.Module, shape: tuple[int, ...], dtype: str, norm: dict[str, Any] | None
               ) -> tuple[bytes, dict[str, Any]]:
    """The checked ONNX graph of `model` on records of `shape` and `dtype` (module doc); ValueError (one line)
    when it cannot be exported or its outputs do not match torch's."""
    import onnxruntime as ort

    dt = np.dtype(dtype)
    wrapped = _OnRecords(copy.deepcopy(model).to("cpu").float().eval(), shape, norm).eval()
    example = torch.from_numpy(_records(shape, dt, 2, seed=1))
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):  # the exporter prints its graph on a failure
            warnings.simplefilter("ignore")
            torch.onnx.export(wrapped, (example,), buf, input_names=["input"], output_names=["output"],
                              dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=OPSET,
                              dynamo=False)
    except Exception as exc:  # noqa: BLE001 - the exporter raises many types for a model it cannot trace
        raise ValueError(f"ONNX export failed ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None
    graph = buf.getvalue()
    x = _records(shape, dt, CHECK_BATCH, seed=2)
    try:
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        got = ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    except Exception as exc:  # noqa: BLE001 - onnxruntime's own error types
        raise ValueError(f"ONNX Runtime cannot run the export ({' '.join(str(exc).split())[:200]})") from None
    with torch.no_grad():
        want = wrapped(torch.from_numpy(x)).numpy()
    if got.shape != want.shape:
        raise ValueError(f"the ONNX graph's output shape {got.shape} is not torch's {want.shape}")
    err = float(np.max(np.abs(got - want) - RTOL * np.abs(want))) if want.size else 0.0
    if not err <= ATOL:
        raise ValueError(f"ONNX Runtime's outputs differ from torch's by {err:.3g} (> {ATOL:g} + {RTOL:g} * |torch|)")
    return graph, {"opset": OPSET, "input": "input", "output": "output", "batch_axis": 0,
                   "check": {"atol": ATOL, "rtol": RTOL, "max_excess": max(err, 0.0)}}


def export(model: nn.Module, version: int, facts: dict[str, Any], formats: tuple[str, ...]) -> Exported:
    """The files of version `version` of `model` in `formats` (onnx, safetensors), for inputs as `facts`
    (RunPlan.model_facts) describe them; an ONNX export that fails is said in `onnx_error` (module doc)."""
    from edgestream.edge.model_format import ONNX_FILE, WEIGHTS_FILE

    out = Exported()
    spec = facts["input"]
    if "onnx" in formats:
        try:
            out.files[ONNX_FILE], out.onnx = onnx_bytes(model, tuple(spec["shape"]), spec["dtype"],
                                                         spec.get("normalization"))
        except ValueError as exc:
            out.onnx_error = f"model {facts['model']['name']}: {exc}; published as safetensors only"
    if "safetensors" in formats or out.onnx_error is not None:
        out.files[WEIGHTS_FILE] = safetensors_bytes(model, version)
    return out
