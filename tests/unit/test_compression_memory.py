"""Error-feedback memories: residual conserves mass; DGC momentum correction by hand."""

from __future__ import annotations

import pytest
import torch

from edgestream.compression import Memory, build_compressor, build_memory


@pytest.mark.parametrize("spec", [{"name": "topk", "ratio": 0.1}, {"name": "randomk", "ratio": 0.2},
                                  {"name": "qsgd", "levels": 4}, {"name": "fp16"}])
def test_residual_error_feedback_conserves_mass(spec: dict) -> None:
    comp = build_compressor(spec)
    mem = build_memory("residual")
    assert isinstance(mem, Memory)
    gen = torch.Generator().manual_seed(0)
    shapes = {"a": (5, 4), "b": (13,)}
    sent = {n: torch.zeros(s, dtype=torch.float64) for n, s in shapes.items()}
    total = {n: torch.zeros(s, dtype=torch.float64) for n, s in shapes.items()}
    for _ in range(8):
        for n, s in shapes.items():
            g = torch.randn(s, generator=gen)
            total[n] += g.double()
            t = mem.compensate(g, n)
            c = comp.compress(t, n)
            mem.update(t, n, comp, c)
            sent[n] += comp.decompress(c).double()
    for n in shapes:
        e = mem.residual(n)
        assert e is not None and e.abs().sum() > 0  # compression really dropped something
        assert torch.allclose(sent[n] + e.double(), total[n], atol=1e-5)


def test_residual_dense_step_folds_residual_in_and_resets() -> None:
    topk, dense = build_compressor({"name": "topk", "ratio": 0.25}), build_compressor({"name": "none"})
    mem = build_memory("residual")
    g1 = torch.tensor([4.0, 1.0, 2.0, 3.0])
    t1 = mem.compensate(g1, "w")
    mem.update(t1, "w", topk, topk.compress(t1, "w"))
    assert mem.residual("w").tolist() == [0.0, 1.0, 2.0, 3.0]
    g2 = torch.ones(4)
    t2 = mem.compensate(g2, "w")
    assert t2.tolist() == [1.0, 2.0, 3.0, 4.0]
    c = dense.compress(t2, "w")
    mem.update(t2, "w", dense, c)
    assert torch.equal(mem.residual("w"), torch.zeros(4))
    mem.reset()
    assert mem.residual("w") is None
    assert torch.equal(mem.compensate(g2, "w"), g2)


def test_none_memory_is_a_no_op() -> None:
    mem = build_memory("none")
    comp = build_compressor({"name": "topk", "ratio": 0.5})
    g = torch.tensor([1.0, -2.0])
    t = mem.compensate(g, "w")
    mem.update(t, "w", comp, comp.compress(t, "w"))
    assert torch.equal(mem.compensate(g, "w"), g)


def test_dgc_momentum_correction_by_hand() -> None:
    comp = build_compressor({"name": "topk", "ratio": 0.5})
    mem = build_memory("dgc", momentum=0.5)
    g = torch.tensor([1.0, 2.0, 3.0, 4.0])
    v = mem.compensate(g, "w")  # u = g, v = g
    assert v.tolist() == [1.0, 2.0, 3.0, 4.0]
    c = comp.compress(v, "w")  # sends coordinates 2, 3
    assert sorted(c.payload[1].tolist()) == [2, 3]
    mem.update(v, "w", comp, c)
    assert mem.u["w"].tolist() == [1.0, 2.0, 0.0, 0.0] and mem.v["w"].tolist() == [1.0, 2.0, 0.0, 0.0]
    v2 = mem.compensate(torch.ones(4), "w")  # u = 0.5 u + 1 = [1.5, 2, 1, 1]; v = v + u = [2.5, 4, 1, 1]
    assert v2.tolist() == [2.5, 4.0, 1.0, 1.0]
    c2 = comp.compress(v2, "w")
    mem.update(v2, "w", comp, c2)
    assert mem.u["w"].tolist() == [0.0, 0.0, 1.0, 1.0] and mem.v["w"].tolist() == [0.0, 0.0, 1.0, 1.0]
    dense = build_compressor({"name": "none"})
    v3 = mem.compensate(torch.zeros(4), "w")
    mem.update(v3, "w", dense, dense.compress(v3, "w"))
    assert torch.equal(mem.u["w"], torch.zeros(4)) and torch.equal(mem.v["w"], torch.zeros(4))
    with pytest.raises(ValueError, match="unknown memory"):
        build_memory("ef21")
