"""Run claims and write their results: `<out>/<claim>.json` and `<out>/README.md` (the table)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from edgestream.profiles import ProfileError
from edgestream.profiles.select import entry_for, resolve
from edgestream.reproduce.claims import CLAIMS, clear_cached_runs
from edgestream.reproduce.experiments import PROFILE

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


def _profiled(names: list[str], given: bool, quick: bool, profile: str, entry: str | None,
              echo: Callable[[str], None]) -> tuple[list[str], tuple[str, str | None], dict[str, Any]]:
    """The claims that can take compute profile `profile` (a claim named by the user that cannot is a
    ProfileError; one left out of "all" is skipped with a line), what experiments.PROFILE gets, the
    record's note."""
    spec, prof = resolve(profile)
    if entry is not None:
        prof.curve(entry)
    keep, skipped, used = [], [], {}
    for name in names:
        model = CLAIMS[name].model(quick)
        try:
            used[name] = None if model is None else entry_for(prof, entry, model)
            keep.append(name)
        except ProfileError as exc:
            if given:
                raise ProfileError(f"claim {name}: {exc}") from None
            skipped.append(name)
    if skipped:
        echo(f"--profile {prof.name}: skipped {', '.join(skipped)} (their devices train a model the profile has no "
             "entry for; pick one with --profile-model)")
    if not keep:
        raise ProfileError(f"--profile {prof.name}: no claim to run with it")
    return keep, (spec, entry), {"name": prof.name, "device": prof.device, "entries": used, "skipped": skipped,
                              "profile_model": entry}


def _profile_line(note: dict[str, Any] | None) -> str:
    """The README's sentence on the compute profile used (none: empty)."""
    if note is None:
        return ""
    entries = sorted({e for e in note["entries"].values() if e})
    skipped = f" Skipped (no entry for their model): {', '.join(note['skipped'])}." if note["skipped"] else ""
    used = f"; entries {', '.join(entries)}" if entries else ""
    return (f" The devices' step times are compute profile {note['name']}'s measured curves ({note['device']}"
            f"{used}), not the claims' own t(b).{skipped}")


def reproduce(names: Sequence[str] | None = None, *, quick: bool = False, out: str | Path = "reproduce",
              echo: Callable[[str], None] = lambda m: print(m, file=sys.stderr), profile: str | None = None,
              profile_model: str | None = None) -> list[dict[str, Any]]:
    """Run the claims `names` (all when None or empty); writes <out>/<claim>.json per claim (as soon as it
    finishes, so an interrupted run keeps what it measured) and <out>/README.md. ValueError naming an
    unknown claim and the known ones. `profile` (NAME|FILE): the simulated devices' step times come from
    that compute profile's entry for the claim's model (`profile_model`: one entry for all) instead of
    the claims' own t(b); ProfileError (a ValueError, one line) when it cannot be used."""
    given = bool(names)
    names = list(names or CLAIMS)
    unknown = [n for n in names if n not in CLAIMS]
    if unknown:
        raise ValueError(f"unknown claim {unknown[0]!r}; claims: {', '.join(CLAIMS)}")
    chosen, note = None, None
    if profile is not None:
        names, chosen, note = _profiled(names, given, quick, profile, profile_model, echo)
    clear_cached_runs()  # a claim pair's shared run may have been made with another profile
    token = PROFILE.set(chosen)
    try:
        records = _run(names, quick, Path(out), echo, note)
    finally:
        PROFILE.reset(token)
        clear_cached_runs()
    return records


def _run(names: list[str], quick: bool, folder: Path, echo: Callable[[str], None],
         note: dict[str, Any] | None) -> list[dict[str, Any]]:
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
               "quick": quick, "wall_s": round(wall, 1), "details": result.details,
               "compute_profile": None if note is None else {"name": note["name"], "device": note["device"],
                                                             "entry": note["entries"][name]}}
        (folder / f"{name}.json").write_text(json.dumps(rec, indent=2, default=str) + "\n")
        verdict = "holds" if holds else "does NOT hold"
        echo(f"    ours {rec['ours']} vs paper {claim.paper_value}: direction {verdict} ({wall:.0f} s)")
        records.append(rec)
    flags = (" --quick" if quick else "") + ("" if note is None else f" --profile {note['name']}") + (
        f" --profile-model {note['profile_model']}" if note and note["profile_model"] else "")
    (folder / "README.md").write_text(
        f"# Reproduced claims\n\n`edgestream reproduce{flags}`: simulator, digits, virtual time (docs/BENCHMARKS.md "
        "explains the deviations)." + _profile_line(note) + "\n\n" + table(records) + "\n")
    return records
