"""`edgestream reproduce`: the claim list, one quick claim run end to end (its JSON and the table), and
refusing an unknown claim in one line."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from edgestream.cli import app
from edgestream.reproduce import CLAIMS, table

#: the claims issue 17 lists (more may be added)
REQUIRED = {"scadles-s1", "scadles-s2", "scadles-s1p", "scadles-s2p", "buffer-truncation", "adaptive-topk",
            "abs-sgd", "abs-sgd-vs-dbs", "non-iid-injection", "adsp-vs-bsp", "adsp-vs-ssp", "adsp-vs-fixed-adacomm",
            "adsp-lead-grows-with-delay", "consgd-vs-ssp", "dynsgd-vs-ssp", "elastic-bsp-vs-bsp",
            "zipline-runtime"}


def test_list_names_every_claim_with_its_paper_and_figure() -> None:
    res = CliRunner().invoke(app, ["reproduce", "--list"])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert REQUIRED <= set(CLAIMS) and len(lines) == len(CLAIMS)
    for line, claim in zip(lines, CLAIMS.values(), strict=True):
        assert line.startswith(claim.name) and claim.paper in line and "paper: " in line


def test_a_quick_claim_runs_and_writes_its_json_and_the_table(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    res = CliRunner().invoke(app, ["reproduce", "elastic-bsp-vs-bsp", "--quick", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rec = json.loads((out / "elastic-bsp-vs-bsp.json").read_text())
    assert rec["claim"] == "elastic-bsp-vs-bsp" and rec["paper_value"] == 1.77 and rec["quick"] is True
    assert rec["ours"] is not None and rec["ours"] > 0
    assert rec["holds"] == (rec["ours"] > 1.0) and rec["ratio"] == round(rec["ours"] / 1.77, 4)
    assert (rec["reason"] is None) == rec["holds"]
    assert rec["details"]["bsp"]["time_to_target_s"] and rec["details"]["elastic-bsp"]["final_accuracy"] > 0.5
    readme = (out / "README.md").read_text()
    assert "| elastic-bsp-vs-bsp | 003 ElasticBSP" in readme and "| elastic-bsp-vs-bsp |" in res.output


def test_table_marks_a_claim_that_does_not_hold_and_a_direction_only_paper() -> None:
    rows = table([{"claim": "c", "paper": "p", "statement": "s", "paper_value": None, "ours": -0.2, "holds": False,
                   "ratio": None, "reason": "why"},
                  {"claim": "d", "paper": "p", "statement": "s", "paper_value": 2.0, "ours": None, "holds": False,
                   "ratio": None, "reason": None}]).splitlines()
    assert rows[2] == "| c | p | s | direction | -0.2 | **no** | - | why |"
    assert rows[3] == "| d | p | s | 2 | not reached | **no** | - |  |"


def test_an_unknown_claim_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["reproduce", "scadles-s9", "--quick", "--out", str(tmp_path)])
    assert res.exit_code == 2 and res.output.strip().startswith("error: unknown claim 'scadles-s9'; claims: ")
