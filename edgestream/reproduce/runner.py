"""Run claims and write their results: `<out>/<claim>.json` and `<out>/README.md` (the table)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from edgestream.reproduce.claims import CLAIMS

#: the reason given for a deviation nobody has isolated with an experiment yet
NOT_ISOLATED = "not isolated yet: no experiment has shown the cause (docs/BENCHMARKS.md)"


def _row(rec: dict[str, Any]) -> str:
    ours = "not reached" if rec["ours"] is None else f"{rec['ours']:g}"
    ratio = "-" if rec["ratio"] is None else f"{rec['ratio']:.3g}"
    reason = rec["reason"] or ""
    paper = "direction" if rec["paper_value"] is None else f"{rec['paper_value']:.3g}"
    return (f"| {rec['claim']} | {rec['paper']} | {rec['statement']} | {paper} | {ours} "
            f"| {'yes' if rec['holds'] else '**no**'} | {ratio} | {reason} |")


def table(records: Sequence[dict[str, Any]]) -> str:
    """The markdown table of claim records (as `reproduce` writes them)."""
    lines = ["| claim | paper | statement | paper | ours | direction holds | ours / paper | reason for a deviation |",
             "|---|---|---|---|---|---|---|---|"]
    return "\n".join(lines + [_row(r) for r in records])


def reproduce(names: Sequence[str] | None = None, *, quick: bool = False, out: str | Path = "reproduce",
              echo: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> list[dict[str, Any]]:
    """Run the claims `names` (all when None or empty); writes <out>/<claim>.json per claim (as soon as it
    finishes, so an interrupted run keeps what it measured) and <out>/README.md. ValueError naming an
    unknown claim and the known ones."""
    names = list(names or CLAIMS)
    unknown = [n for n in names if n not in CLAIMS]
    if unknown:
        raise ValueError(f"unknown claim {unknown[0]!r}; claims: {', '.join(CLAIMS)}")
    folder = Path(out)
    runs = folder / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    records = []
    for i, name in enumerate(names, 1):
        claim = CLAIMS[name]
        echo(f"[{i}/{len(names)}] {name}: {claim.statement} ({claim.paper}){' --quick' if quick else ''}")
        t0 = time.perf_counter()
        result = claim.run(quick, runs)
        wall = time.perf_counter() - t0
        holds = claim.holds(result)
        rec = {"claim": name, "paper": claim.paper, "statement": claim.statement, "metric": claim.metric,
               "paper_value": claim.paper_value, "ours": result.ours, "holds": holds,
               "ratio": (None if result.ours is None or not claim.paper_value
                         else round(result.ours / claim.paper_value, 4)),
               "reason": result.reason or (None if holds else claim.deviation or NOT_ISOLATED),
               "quick": quick, "wall_s": round(wall, 1), "details": result.details}
        (folder / f"{name}.json").write_text(json.dumps(rec, indent=2, default=str) + "\n")
        verdict = "holds" if holds else "does NOT hold"
        echo(f"    ours {rec['ours']} vs paper {claim.paper_value}: direction {verdict} ({wall:.0f} s)")
        records.append(rec)
    (folder / "README.md").write_text(
        "# Reproduced claims\n\n`edgestream reproduce" + (" --quick" if quick else "") + "`: simulator, digits, "
        "virtual time (docs/BENCHMARKS.md explains the deviations).\n\n" + table(records) + "\n")
    return records
