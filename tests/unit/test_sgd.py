"""edgestream's SGD (edgestream/models/sgd.py) is torch.optim.SGD, bit for bit, without importing torch._dynamo
while nothing is compiled; once something is, torch's own wrappers take over. Each check runs in a fresh
process, since a test process may have imported torch._dynamo already."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from support.sources import USERMOD

SAME = textwrap.dedent("""
    import sys, itertools, torch
    from edgestream.models import build_optimizer
    from edgestream.models.sgd import SGD

    def run(make, dtype, shape, classes, momentum, wd, foreach, steps=4):
        torch.manual_seed(7)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(int(torch.tensor(shape).prod()), 9),
                                    torch.nn.BatchNorm1d(9), torch.nn.ReLU(), torch.nn.Linear(9, classes or 3)).to(dtype)
        opt = make(model, momentum, wd, foreach)
        hooks = []
        opt.register_step_pre_hook(lambda o, a, k: hooks.append("pre"))
        opt.register_step_post_hook(lambda o, a, k: hooks.append("post"))
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, [2], gamma=0.5)
        x = torch.randn(6, *shape, dtype=dtype)
        # classes 0: a regression task (3 float targets, squared error)
        y = torch.randint(0, classes, (6,)) if classes else torch.randn(6, 3, dtype=dtype)
        lossf = torch.nn.functional.cross_entropy if classes else torch.nn.functional.mse_loss
        for _ in range(steps):
            opt.zero_grad()
            lossf(model(x), y).backward()
            assert opt.step() is None
            sched.step()
        loss = [None]
        def closure():
            opt.zero_grad()
            loss[0] = lossf(model(x), y)
            loss[0].backward()
            return loss[0]
        assert opt.step(closure) is loss[0]
        state = opt.state_dict()
        again = make(model, momentum, wd, foreach)
        again.load_state_dict(state)
        assert again.state_dict()["param_groups"] == state["param_groups"]
        return [p.detach().clone() for p in model.parameters()], state, hooks, torch.is_grad_enabled()

    torch_sgd = lambda m, mo, wd, fe: torch.optim.SGD(m.parameters(), lr=0.1, momentum=mo, weight_decay=wd, foreach=fe)
    ours = lambda m, mo, wd, fe: SGD(m.parameters(), lr=0.1, momentum=mo, weight_decay=wd, foreach=fe)
    cases = list(itertools.product([torch.float32, torch.float64], [(5,), (2, 3, 4)], [2, 7, 0], [0.0, 0.9],
                                   [0.0, 1e-4], [True, False]))
    mine = [run(ours, *c) for c in cases]  # all of edgestream's first, so nothing of torch's loads dynamo early
    assert isinstance(build_optimizer(torch.nn.Linear(2, 2), 0.1), torch.optim.SGD)
    print("dynamo after ours:", "torch._dynamo" in sys.modules)
    theirs = [run(torch_sgd, *c) for c in cases]
    print("dynamo after torch's:", "torch._dynamo" in sys.modules)
    after = [run(ours, *c) for c in cases]  # torch._dynamo loaded now: torch's own wrappers run
    for case, a, b, c in zip(cases, mine, theirs, after):
        for got in (a, c):
            assert all(torch.equal(p, q) for p, q in zip(got[0], b[0])), case
            assert got[1]["param_groups"] == b[1]["param_groups"], case
            assert all(torch.equal(got[1]["state"][i]["momentum_buffer"], b[1]["state"][i]["momentum_buffer"])
                       if b[1]["state"][i].get("momentum_buffer") is not None else True for i in b[1]["state"]), case
            assert got[2] == b[2] == ["pre", "post"] * 5 and got[3] and b[3], case
    print("cases", len(cases))
""")


def _python(code: str, folder=None) -> list[str]:
    """`code`'s output lines in a fresh Python; `folder` (a user's modules) on its import path and its working
    directory."""
    env = None if folder is None else \
        dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=folder,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_edgestream_sgd_is_torch_sgd_bit_for_bit_and_loads_no_compiler():
    """Dtypes, shapes, class counts and a regression task, momentum, weight decay, foreach and a closure; step hooks, a scheduler, state
    saved and loaded: the same parameters and state as torch.optim.SGD, before and after torch._dynamo loads."""
    out = _python(SAME)
    assert out == ["dynamo after ours: False", "dynamo after torch's: True", "cases 96"]


def test_a_compiled_training_step_with_edgestream_sgd_matches_torch():
    """A user who compiles (torch.compile, dynamo's eager backend: no C++ toolchain needed) a whole step that
    calls zero_grad and step, with the optimizer built before dynamo loaded, gets torch's numbers."""
    code = textwrap.dedent("""
        import torch
        from edgestream.models.sgd import SGD

        def train(make):
            torch.manual_seed(3)
            model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
            opt = make(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
            x, y = torch.randn(10, 4), torch.randint(0, 3, (10,))

            @torch.compile(backend="eager")
            def step():
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                return loss

            losses = [float(step()) for _ in range(5)]
            return losses, [p.detach().clone() for p in model.parameters()]

        a = train(SGD)
        b = train(torch.optim.SGD)
        assert a[0] == b[0] and all(torch.equal(p, q) for p, q in zip(a[1], b[1])), (a[0], b[0])
        print("ok", a[0][0] > a[0][-1])
    """)
    assert _python(code) == ["ok True"]


@pytest.mark.parametrize(("task", "data", "model"), [
    ("classification", "{dataset: digits}", "{name: cnn-small}"),
    ("regression", "{dataset: synthetic, shape: [2, 3], n_train: 64, n_test: 16, kwargs: {target_dim: 2}}",
     "{name: 'usermod:build', kwargs: {hidden: 5, norm: true}}"),
])
def test_a_trainer_process_step_loads_no_compiler(tmp_path, task, data, model):
    """What a trainer does with its optimizer -- build, step, checkpoint, resume -- imports no torch._dynamo: a
    built-in model on classes, and a user's model (a module written into a folder of its own) on a regression."""
    (tmp_path / "usermod.py").write_text(textwrap.dedent(USERMOD))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: c\ntask: {task}\ndata: {data}\nmodel: {model}\nalgorithm: {{name: ddl}}\n")
    code = textwrap.dedent(f"""
        import sys, torch
        from pathlib import Path
        from edgestream.config import load_config
        from edgestream.runner.plan import RunPlan
        from edgestream.trainer.checkpoint import load_checkpoint, save_checkpoint
        plan = RunPlan.resolve(load_config({str(cfg)!r}))
        model = plan.build_model()
        opt = plan.build_optimizer(model)
        x = torch.randn(4, *plan.sample_spec.shape)
        for _ in range(2):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
        ckpt = Path({str(tmp_path / "rank0.pt")!r})
        save_checkpoint(ckpt, model=model, optimizer=opt, step=2, state={{}}, stream={{}}, elapsed_s=1.0, samples=8)
        again = plan.build_optimizer(plan.build_model())
        again.load_state_dict(load_checkpoint(ckpt)["optimizer"])
        assert again.state_dict()["state"][0]["momentum_buffer"].equal(opt.state_dict()["state"][0]["momentum_buffer"])
        print(type(model).__name__, sorted(m for m in sys.modules if m.startswith("torch._dynamo"))[:3])
    """)
    assert _python(code, tmp_path) == [("Net" if task == "regression" else "Sequential") + " []"]
