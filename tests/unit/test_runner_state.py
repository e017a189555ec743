"""Algorithm state is explicit (edgestream.sync.context, "State contract"): a worker checkpointed at a
`Log` (ctx.step, ctx.state, and the lockstep engine's model, optimizer and stream position, saved with
torch.save and loaded with weights_only=True) and restarted continues exactly as the uninterrupted
run: parameters bitwise equal after k + j steps, for every algorithm and the stateful compressors.

Tiny MLP on scikit-learn digits, 3 workers, momentum 0.5 (so optimizer state matters), lockstep engine.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
from sklearn.datasets import load_digits

from edgestream.models import build_model
from edgestream.runner.lockstep import ArraySource, LockstepEngine
from edgestream.streams import build_batch_policy
from edgestream.sync import ALGORITHMS, Log, WorkerContext

M = 3
RATES = (8.0, 16.0, 24.0)
SPEEDS = (1.0, 2.0, 3.0)
TOTAL = 9  # k + j steps
_d = load_digits()
X = torch.tensor(_d.data / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
Y = torch.tensor(_d.target)

# case: (algorithm, params, context keywords, k = the step to checkpoint at, which Log with ctx.step == k)
CASES: dict[str, tuple[str, dict, dict, int, str]] = {
    "ddl": ("ddl", {"batch": 16}, {}, 4, "first"),
    "ddl+topk(residual)": ("ddl", {"batch": 16}, {"compression": {"name": "topk", "ratio": 0.2}}, 4, "first"),
    "ddl+randomk(dgc)": ("ddl", {"batch": 16}, {"compression": {"name": "randomk", "ratio": 0.3, "memory": "dgc"}},
                         4, "first"),
    "ddl+qsgd": ("ddl", {"batch": 16}, {"compression": {"name": "qsgd", "levels": 8}}, 4, "first"),
    "scadles": ("scadles", {}, {}, 3, "first"),
    "scadles+adaptive-topk": ("scadles", {}, {"compression": {"name": "adaptive-topk", "ratio": 0.3, "delta": 0.12}},
                              4, "first"),
    "scadles+adaptive-reference": ("scadles", {"epoch_steps": 4},
                                   {"compression": {"name": "adaptive-topk", "ratio": 0.3, "delta": 0.3,
                                                    "statistic": "reference"}}, 4, "first"),
    "scadles+injection": ("scadles", {}, {"injection": {"alpha": 0.5, "beta": 0.25}}, 4, "first"),
    "abs-sgd": ("abs-sgd", {"ref_batch": 8}, {}, 4, "first"),
    "dbs-sgd": ("dbs-sgd", {"base_batch": 16, "every": 3}, {}, 3, "first"),   # restart right before a re-assignment
    "local-sgd": ("local-sgd", {"tau": 3}, {}, 4, "first"),                   # in mid-period
    "fixed-adacomm": ("fixed-adacomm", {"tau": 2}, {}, 4, "last"),            # at the averaging round's Log
    "adacomm": ("adacomm", {"tau": 4, "check_every": 1}, {}, 4, "first"),     # averaging pending at the Log
}


def _engine() -> LockstepEngine:
    torch.manual_seed(0)
    model = build_model("mlp", (1, 8, 8), 10)
    sources = [ArraySource(X[i::M], Y[i::M], rate=r, seed=i) for i, r in enumerate(RATES)]
    return LockstepEngine(model, sources, build_batch_policy({"policy": "rate", "min": 8, "max": 64}),
                          momentum=0.5, speeds=SPEEDS)


def _context(name: str, params: dict, kw: dict, rank: int, step: int = 0, state: dict | None = None) -> WorkerContext:
    return WorkerContext(rank=rank, world_size=M, seed=5, params=ALGORITHMS[name].resolve(params), lr=0.2,
                         should_stop=lambda completed: completed >= TOTAL, step=step, state=state or {},
                         max_steps=TOTAL, **kw)


def _roundtrip(obj: Any) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _lines(events: list[dict], device: int) -> list[tuple]:
    return [(e["step"], e.get("round"), e.get("loss"), e.get("lr")) for e in events if e["device"] == device]


@pytest.mark.parametrize("case", list(CASES))
def test_a_worker_restored_from_a_log_checkpoint_continues_bitwise(case: str) -> None:
    name, params, kw, k, which = CASES[case]
    spec = ALGORITHMS[name]

    # A: the uninterrupted run, checkpointing every worker at a Log with ctx.step == k
    a = _engine()
    ctxs = [_context(name, params, kw, r) for r in range(M)]
    saved: dict[int, bytes] = {}

    def on_request(rank: int, req: Any) -> None:
        ctx = ctxs[rank]
        if isinstance(req, Log) and ctx.step == k and (which == "last" or rank not in saved):
            saved[rank] = _roundtrip({"step": ctx.step, "state": ctx.state, "engine": a.checkpoint(rank)})

    a.run([spec.worker(c) for c in ctxs], on_request=on_request)
    assert sorted(saved) == list(range(M)) and all(c.step == TOTAL for c in ctxs)

    # B: a fresh engine and fresh workers, restored from the checkpoints only
    b = _engine()
    with torch.no_grad():  # make sure nothing of the initial model survives the restore
        for model in b.models:
            for p in model.parameters():
                p.add_(1.0)
    restored = []
    for rank in range(M):
        ckpt = torch.load(io.BytesIO(saved[rank]), weights_only=True)
        b.restore(rank, ckpt["engine"])
        restored.append(_context(name, params, kw, rank, step=ckpt["step"], state=ckpt["state"]))
    b.run([spec.worker(c) for c in restored])

    assert [c.step for c in restored] == [TOTAL] * M
    for rank in range(M):
        for x, y in zip(a.params(rank), b.params(rank), strict=True):
            assert torch.equal(x, y), f"{case}: worker {rank} differs after the restart"
    for rank in range(M):  # the restarted run logs what the original logged after the checkpoint
        after = _lines(b.events, rank)
        assert after and _lines(a.events, rank)[-len(after):] == after
    if "compression" in kw:  # the compressors' state was really used after the restart
        assert any(e.get("compressed") for e in b.events)


def test_state_holds_only_tensors_and_plain_values() -> None:
    """What each algorithm keeps in ctx.state loads back with weights_only=True and names its parts."""
    expected = {"ddl": {"codec"}, "scadles": {"codec"}, "abs-sgd": {"w_prev", "G", "n", "loss_sum"},
                "dbs-sgd": {"batches", "busy_s", "samples", "codec"},
                "local-sgd": {"tau", "f_0", "rounds", "period_steps", "loss_sum"}}
    for name, keys in expected.items():
        params = {"tau": 2} if name == "local-sgd" else {}
        ctxs = [_context(name, params, {}, r) for r in range(M)]
        for c in ctxs:
            c.should_stop = lambda completed: completed >= 2
        _engine().run([ALGORITHMS[name].worker(c) for c in ctxs])
        assert set(ctxs[0].state) == keys, name
        back = torch.load(io.BytesIO(_roundtrip(ctxs[0].state)), weights_only=True)
        assert set(back) == keys
