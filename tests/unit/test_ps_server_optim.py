"""The parameter server's optimizer is explicit (optim.server, plain SGD by default as in the papers), and
an optimizer setting the configured algorithm will not use is named in one warning line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from edgestream.cli import app
from edgestream.config import validate_dict
from edgestream.runner.plan import RunPlan, optimizer_notes
from edgestream.sync.requests import Push

GRADIENT_PS = ["asp", "ssp", "dssp", "consgd", "dynsgd", "elastic-bsp", "bsp"]


def _cfg(algorithm: str, optim: dict | None = None, shape: list[int] | None = None, classes: int = 10):
    return validate_dict({"name": "o", "devices": {"count": 2}, "algorithm": {"name": algorithm},
                          "data": {"dataset": "synthetic", "shape": shape or [1, 4, 4], "num_classes": classes,
                                   "n_train": 20, "n_test": 10},
                          "model": {"name": "mlp"}, **({"optim": optim} if optim is not None else {})})


@pytest.mark.parametrize(("shapes", "lr"), [([(3,)], 0.1), ([(4, 5), (7,)], 0.5), ([(2, 3, 3), (1,)], 0.03)])
def test_asp_with_the_default_optim_is_w_minus_lr_u_exactly(shapes: list[tuple[int, ...]], lr: float) -> None:
    """The default optim block (workers' momentum 0.9, weight decay 1e-4) does not reach the PS: each push
    moves W by exactly -lr * u, as ASP's rule says (momentum would make the second push move it further)."""
    plan = RunPlan.resolve(_cfg("asp", {"lr": lr}))
    assert (plan.cfg.optim.momentum, plan.cfg.optim.weight_decay) == (0.9, 1e-4)
    torch.manual_seed(len(shapes))
    w0 = [torch.randn(s, dtype=torch.float64) for s in shapes]
    coord = plan.algorithm.coordinator(plan.server_context(), w0)
    expected = [t.clone() for t in w0]
    for _ in range(3):
        u = [torch.randn(s, dtype=torch.float64) for s in shapes]
        coord.push(0, Push(u, version=coord.version, n=4, lr=lr), 0.0)
        expected = [e - lr * g for e, g in zip(expected, u, strict=True)]
    for got, want in zip(coord.model(), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize(("mu", "wd"), [(0.5, 0.0), (0.9, 0.01), (0.0, 0.1)])
def test_optim_server_is_the_servers_sgd(mu: float, wd: float) -> None:
    plan = RunPlan.resolve(_cfg("ssp", {"lr": 0.2, "momentum": 0.0, "weight_decay": 0.0,
                                        "server": {"momentum": mu, "weight_decay": wd}}))
    w0 = [torch.randn(5, 3, dtype=torch.float64), torch.randn(4, dtype=torch.float64)]
    coord = plan.algorithm.coordinator(plan.server_context(), w0)
    ref = [t.clone().requires_grad_(True) for t in w0]
    opt = torch.optim.SGD(ref, lr=0.2, momentum=mu, weight_decay=wd)
    for k in range(4):
        u = [torch.randn_like(t) for t in w0]
        coord.push(k % 2, Push(u, version=coord.version, n=4, lr=0.2), float(k))
        for p, g in zip(ref, u, strict=True):
            p.grad = g.clone()
        opt.step()
    for got, want in zip(coord.model(), ref, strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("algorithm", GRADIENT_PS)
def test_workers_momentum_under_a_gradient_ps_algorithm_is_named(algorithm: str) -> None:
    notes = optimizer_notes(_cfg(algorithm, {"momentum": 0.9, "weight_decay": 0.0}))
    assert len(notes) == 1 and notes[0].startswith(f"optim.momentum: 0.9 is not used by {algorithm}: ")
    assert "optim.server.momentum" in notes[0]
    assert optimizer_notes(_cfg(algorithm, {"momentum": 0.0, "weight_decay": 0.0,
                                            "server": {"momentum": 0.5}})) == []


@pytest.mark.parametrize(("algorithm", "optim", "starts"), [
    ("adsp", {"momentum": 0.9, "server": {"momentum": 0.3}}, []),            # local steps use both
    ("adsp", {"momentum": 0.0, "server": {"weight_decay": 0.01}}, ["optim.server.weight_decay: 0.01 is not used by adsp"]),
    ("fixed-adacomm-ps", {"server": {"momentum": 0.5}}, ["optim.server.momentum: 0.5 is not used by fixed-adacomm-ps"]),
    ("adacomm-ps", {"momentum": 0.9}, []),                                   # the workers' own SGD
    ("ddl", {"server": {"momentum": 0.5}}, ["optim.server.momentum: 0.5 is not used by ddl"]),
    ("scadles", {"momentum": 0.9}, []),
    ("ssp", {"momentum": 0.9, "weight_decay": 1e-3},
     ["optim.momentum: 0.9 is not used by ssp", "optim.weight_decay: 0.001 is not used by ssp"]),
])
def test_optimizer_notes(algorithm: str, optim: dict, starts: list[str]) -> None:
    notes = optimizer_notes(_cfg(algorithm, {"weight_decay": 0.0, **optim}))
    assert len(notes) == len(starts) and all(n.startswith(s) for n, s in zip(notes, starts, strict=True)), notes


def test_cli_prints_the_note_as_one_warning_line_and_still_runs(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"name": "c", "devices": {"count": 2}, "algorithm": {"name": "ssp"},
                                    "optim": {"momentum": 0.9, "weight_decay": 0.0}}))
    res = CliRunner().invoke(app, ["config", "validate", str(path)])
    assert res.exit_code == 0, res.output
    warnings = [x for x in res.output.splitlines() if x.startswith("warning: ")]
    assert len(warnings) == 1 and "optim.momentum: 0.9 is not used by ssp" in warnings[0]
    bad = tmp_path / "b.yaml"
    bad.write_text(yaml.safe_dump({"name": "b", "algorithm": {"name": "adsp", "params": {"ps_momentum": 0.5}}}))
    res = CliRunner().invoke(app, ["config", "validate", str(bad)])
    assert res.exit_code == 2 and "algorithm.params.ps_momentum: unknown field" in res.output


def test_defaults_the_user_did_not_write_are_not_warned_about() -> None:
    cfg = validate_dict({"name": "d", "algorithm": {"name": "ssp"}})
    assert (cfg.optim.momentum, cfg.optim.weight_decay) == (0.9, 1e-4) and optimizer_notes(cfg) == []
    both = validate_dict({"name": "d", "algorithm": {"name": "ddl"},
                          "optim": {"server": {"momentum": 0.5, "weight_decay": 0.01}}})
    assert [n.split(":")[0] for n in optimizer_notes(both)] == ["optim.server.momentum", "optim.server.weight_decay"]
