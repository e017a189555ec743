"""Continuous training's config (issue 33 item 4): `stop: {}` means no target and no time or step limit;
no `stop` key keeps the defaults; a run without a limit gets checkpoint.every_s (60) unless it gives a
checkpoint field; the simulator refuses it in one line naming `stop`; checkpoint.every_s is checked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from edgestream.cli import app
from edgestream.config import CONTINUOUS_EVERY_S, ConfigError, validate_dict
from edgestream.trainer.schedule import CheckpointSchedule


def test_stop_given_empty_is_continuous_and_no_stop_key_keeps_the_defaults():
    default = validate_dict({"name": "x"})
    assert (default.stop.target_accuracy, default.stop.max_time_s, default.stop.max_steps) == (0.9, 600.0, None)
    assert not default.stop.continuous and default.checkpoint.every_s is None and default.checkpoint.every_steps is None
    for raw in ({}, None, {"target_accuracy": None, "max_time_s": None}):  # `stop: {}`, `stop:`, all null
        cfg = validate_dict({"name": "x", "stop": raw})
        assert cfg.stop.continuous and not cfg.stop.bounded and cfg.target() is None
        assert cfg.checkpoint.every_s == CONTINUOUS_EVERY_S == 60.0 and cfg.checkpoint.every_steps is None
    # a target alone (what `stop: {max_time_s: null}` leaves): no limit either, so checkpoints by default
    target_only = validate_dict({"name": "x", "stop": {"max_time_s": None}})
    assert not target_only.stop.continuous and not target_only.stop.bounded
    assert target_only.target() == ("accuracy", 0.9) and target_only.checkpoint.every_s == 60.0


def test_a_continuous_run_keeps_the_checkpoint_fields_it_gives():
    assert validate_dict({"name": "x", "stop": {}, "checkpoint": {"every_steps": 5}}).checkpoint.every_s is None
    assert validate_dict({"name": "x", "stop": {}, "checkpoint": {"every_s": 2.5}}).checkpoint.every_s == 2.5
    none = validate_dict({"name": "x", "stop": {}, "checkpoint": {"every_steps": None, "every_s": None}})
    assert none.checkpoint.every_s is None and none.checkpoint.every_steps is None
    both = validate_dict({"name": "x", "checkpoint": {"every_steps": 10, "every_s": 30}}).checkpoint
    assert (both.every_steps, both.every_s) == (10, 30.0)


def test_the_resolved_config_shows_the_default_and_loads_back_the_same(tmp_path):
    cfg = validate_dict({"name": "x", "stop": {}})
    doc = yaml.safe_load(cfg.to_yaml())
    assert doc["stop"] == {"target_accuracy": None, "target_metric": None, "max_time_s": None, "max_steps": None}
    assert doc["checkpoint"] == {"every_steps": None, "every_s": 60.0}
    assert validate_dict(doc).to_yaml() == cfg.to_yaml()  # config.yaml of a run resumes as the same config
    f = tmp_path / "c.yaml"
    f.write_text("name: x\nstop: {}\n")
    res = CliRunner().invoke(app, ["config", "show", str(f)])
    assert res.exit_code == 0 and yaml.safe_load(res.stdout)["checkpoint"]["every_s"] == 60.0


@pytest.mark.parametrize("bad, line", [
    (0, "checkpoint.every_s: 0 is not allowed; must be > 0"),
    (-5, "checkpoint.every_s: -5 is not allowed; must be > 0"),
    (True, "checkpoint.every_s: true is not allowed; must be a number, not true/false"),
    (float("inf"), "checkpoint.every_s"),
])
def test_checkpoint_every_s_is_checked(bad, line):
    with pytest.raises(ConfigError) as info:
        validate_dict({"name": "x", "checkpoint": {"every_s": bad}})
    assert len(info.value.problems) == 1 and line in info.value.problems[0]


@pytest.mark.parametrize("stop", [{}, {"max_time_s": None}])
def test_the_simulator_refuses_a_run_without_an_end_in_one_line_naming_stop(tmp_path, stop):
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump({"name": "x", "stop": stop, "data": {"dataset": "digits"}, "devices": {"count": 2}}))
    res = CliRunner().invoke(app, ["run", str(f), "--engine", "sim", "--out", str(tmp_path / "runs"), "--quiet"])
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert lines[0].startswith("stop: ") and "only on engine local" in lines[0]
    assert "give stop.max_time_s or stop.max_steps" in lines[0]
    assert not (tmp_path / "runs").exists()  # refused before a run directory


def test_the_time_schedule_agrees_through_rank_0_and_counts_steps_too():
    """Two ranks with different clocks checkpoint at the same steps: rank 0's verdicts decide."""
    clocks = [[0.0], [0.0]]
    verdicts: list[tuple[bool, int]] = []

    def agree_for(rank):
        def agree(due, nxt):
            if rank == 0:
                verdicts.append((due, nxt))
            return verdicts[-1]
        return agree

    scheds = [CheckpointSchedule(None, 1.0, 0, agree=agree_for(r), clock=lambda r=r: clocks[r][0]) for r in (0, 1)]
    saved: list[list[int]] = [[], []]
    for step in range(1, 60):
        for r in (0, 1):  # rank 0 first (it broadcasts); rank 1's clock runs 3x slower: it would decide otherwise
            clocks[r][0] += 0.1 if r == 0 else 0.3
            if scheds[r].due(step):
                saved[r].append(step)
                scheds[r].saved(step)
    assert saved[0] == saved[1] and len(saved[0]) >= 4
    gaps = [b - a for a, b in zip(saved[0], saved[0][1:], strict=False)]
    assert all(9 <= g <= 11 for g in gaps), saved[0]  # about every_s (1 s) of rank 0's 0.1 s steps
    assert scheds[0].decisions < 59 / 2  # not a broadcast per step
    # every_steps alone needs no agreement; with every_s, either fires
    alone = CheckpointSchedule(5, None, 0)
    assert [s for s in range(1, 21) if alone.due(s)] == [5, 10, 15, 20]
    resumed = CheckpointSchedule(5, None, 10)
    assert not resumed.due(10) and resumed.due(15)


def test_compare_and_the_end_summary_state_a_run_without_a_target_or_limit():
    from edgestream.comparisons import _limits
    from edgestream.runner.report import end_lines, target_text

    assert _limits(validate_dict({"name": "x", "stop": {}}).stop) == "no time or step limit"
    assert _limits(validate_dict({"name": "x"}).stop) == "max time 600.0 s"
    assert _limits(validate_dict({"name": "x", "stop": {"max_steps": 40}}).stop) == "max time 600.0 s, max 40 steps"
    summary = {"target": None, "stop_reason": "interrupted", "engine": "local", "algorithm": "ddl", "steps": 12,
               "final_accuracy": 0.5, "interrupted": True, "interrupted_by": "SIGTERM"}
    assert target_text(summary) == "no target"
    assert any("no target" in line for line in end_lines(summary, Path("runs/x")))
