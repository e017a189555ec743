"""Parameter-server algorithms on real trainer processes (`edgestream run --engine local`): the
orchestrator starts the Kafka PS (`edgestream ps`), three workers push and pull through the broker, and
the PS scores its model. Also: the SSP bound in the real event log, and a PS killed with SIGKILL in
mid-run, restarted by the orchestrator, losing no acknowledged push and applying none twice."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from factories import digits_config  # tests/factories.py
from support.runs import records

from edgestream.config import validate_dict
from edgestream.runner import run_config


def _cfg(name: str, algorithm: str, params: dict, *, max_steps: int = 60, seed: int = 1,
         data: dict | None = None) -> object:
    # 1:1:3 compute (worker 2 three times slower), streams fast enough never to starve a worker
    return validate_dict(digits_config(
        name, seed=seed, devices=3, rate=400, compute={"static": [1.0, 1.0, 3.0]}, lr=0.1, momentum=0.0,
        weight_decay=0.0, algorithm=algorithm, params=params, batch=32, max_steps=max_steps, max_time_s=180,
        eval_s=1.0, data=data or {"dataset": "digits"}))


def _ps_lines(run_dir: Path, kind: str) -> list[dict]:
    return [r for r in records(run_dir / "ranks" / "ps.jsonl") if r.get("kind") == kind]


CASES = {
    "ssp": {"s": 2},
    "dynsgd": {"s": 3},
    "elastic-bsp": {"R": 5},
    "adsp": {"gamma_s": 1.0, "epoch_s": 20.0, "eval_s": 2.0},
}


@pytest.mark.parametrize("algorithm", sorted(CASES))
def test_ps_algorithm_learns_on_three_real_workers(bootstrap: str, tmp_path: Path, algorithm: str) -> None:
    cfg = _cfg(f"ps-{algorithm}", algorithm, CASES[algorithm])
    run_dir, summary = run_config(cfg, "local", out=tmp_path, bootstrap=bootstrap, progress=False)
    pids = json.loads((run_dir / "pids.json").read_text())
    assert pids["ps"] is not None and len(pids["trainers"]) == 3
    ps = summary["ps"]
    assert ps["status"] == "finished" and ps["restarts"] == 0 and ps["rejected"] == 0
    assert ps["duplicates_dropped"] == 0 and ps["pushes_applied"] == ps["pushes_received"] > 0
    steps = [e for e in records(run_dir / "events.jsonl") if e.get("kind") == "step"]
    assert steps and all("staleness" in e for e in steps if e.get("pulls")), "step lines carry staleness"
    ranks = [json.loads((run_dir / "ranks" / f"{r}.summary.json").read_text()) for r in range(3)]
    pushes = sum(int(e.get("pushes") or 0) for e in steps)
    assert pushes == ps["pushes_applied"], "every acknowledged push applied once"
    assert summary["final_accuracy"] is not None and summary["final_accuracy"] > 0.6, summary
    evals = [e for e in records(run_dir / "events.jsonl") if e.get("kind") == "eval"]
    assert evals[-1]["accuracy"] > evals[0]["accuracy"] + 0.3
    if algorithm in ("ssp", "dynsgd"):
        # the SSP bound in the real event log: when the PS answered a pull of worker w, w had pushed at
        # most s more updates than the slowest worker
        s = CASES[algorithm]["s"]
        replies = [r for r in _ps_lines(run_dir, "ps") if not r["stop"]]
        assert replies
        for r in replies:
            assert r["pushes"][r["worker"]] - min(r["pushes"]) <= s, r
        # the slow worker (3x compute) made fewer steps than the others only within the bound
        assert max(x["steps"] for x in ranks) - min(x["steps"] for x in ranks) <= s + 1
    if algorithm == "adsp":
        assert ps["commits"] > 0 and ps["pushes_applied"] == ps["commits"]


def test_ps_killed_mid_run_is_restarted_and_loses_or_repeats_no_push(bootstrap: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGESTREAM_PS_CHECKPOINT_S", "0.7")
    cfg = _cfg("ps-crash", "ssp", {"s": 3}, max_steps=120)
    result: dict = {}

    def run() -> None:
        try:
            result["out"] = run_config(cfg, "local", out=tmp_path, bootstrap=bootstrap, progress=False)
        except Exception as exc:  # noqa: BLE001 - reported below
            result["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    deadline = time.monotonic() + 120
    killed = None
    while time.monotonic() < deadline and killed is None:
        time.sleep(0.2)
        for run_dir in tmp_path.glob("ps-crash-*"):
            ps_file, pids = run_dir / "ranks" / "ps.jsonl", run_dir / "pids.json"
            if ps_file.exists() and pids.exists() and ps_file.read_text().count('"ps_push"') >= 60:
                killed = json.loads(pids.read_text())["ps"]
                os.kill(killed, signal.SIGKILL)
    assert killed is not None, "the run never got going"
    t.join(240)
    assert not t.is_alive() and "error" not in result, result
    run_dir, summary = result["out"]
    ps = summary["ps"]
    assert ps["restarts"] == 1 and ps["starts"] == 2 and ps["status"] == "finished"
    assert json.loads((run_dir / "pids.json").read_text())["ps"] != killed
    # the workers' side: every step pushed once, with id = the step count after it (1..steps)
    ranks = [json.loads((run_dir / "ranks" / f"{r}.summary.json").read_text()) for r in range(3)]
    pushed = {r: set(range(1, ranks[r]["steps"] + 1)) for r in range(3)}
    # the PS's side: the pushes it applied, less those the restart rolled back (applied after the
    # checkpoint it restarted from, then replayed)
    applied: dict[int, list[int]] = {r: [] for r in range(3)}
    for rec in records(run_dir / "ranks" / "ps.jsonl"):
        if rec["kind"] == "ps_start" and rec["start"] > 1:
            for r in range(3):
                applied[r] = [i for i in applied[r] if i <= rec["last_push"][r]]
        elif rec["kind"] == "ps_push":
            applied[rec["worker"]].append(rec["id"])
    for r in range(3):
        assert sorted(applied[r]) == sorted(pushed[r]), f"worker {r}: applied {len(applied[r])} of {len(pushed[r])}"
    assert ps["pushes"] == [ranks[r]["steps"] for r in range(3)]  # the coordinator's own count agrees
    assert ps["replayed"] >= 0 and summary["final_accuracy"] > 0.6


def test_compare_puts_simulated_and_real_ps_runs_side_by_side(bootstrap: str, tmp_path: Path) -> None:
    from edgestream.comparisons import parse_variants, run_compare

    # not the defaults: 12 classes, a [2, 6, 6] input (the PS topics and wire sized for that model)
    cfg = _cfg("ps-cmp", "ssp", {"s": 2}, max_steps=20,
               data={"dataset": "synthetic", "shape": [2, 6, 6], "num_classes": 12, "n_train": 1500, "n_test": 300})
    folder, summaries, table = run_compare(cfg, parse_variants("ssp"), out=tmp_path, engine="sim,local",
                                           progress=False, bootstrap=bootstrap)
    assert list(summaries) == ["ssp@sim", "ssp@local"]
    assert [s["engine"] for s in summaries.values()] == ["sim", "local"]
    for label, s in summaries.items():  # the first worker at max_steps stops the run; the others within s + 1
        pushes = s["ps"]["pushes"]
        assert max(pushes) == 20 and min(pushes) >= 20 - 3, (label, pushes)
    text = (folder / "compare.md").read_text()
    assert all(label in text for label in summaries) and "ssp@local" in table
