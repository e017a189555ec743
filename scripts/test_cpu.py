"""Where the test suite's CPU goes: reads the lines tests/conftest.py appends under EDGESTREAM_TEST_CPU=FILE.

    EDGESTREAM_TEST_CPU=/tmp/cpu.jsonl make test
    python scripts/test_cpu.py /tmp/cpu.jsonl [--top 30]

Prints the total CPU and wall seconds, the CPU by test file (tests, CPU s, share, wall s) and the costliest tests.
A test's CPU is its pytest worker's and what that worker reaped while the test ran (trainer and CLI processes,
brokers of its own); the shared broker is one line of its own.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--top", type=int, default=30, help="files and tests listed (default 30)")
    args = ap.parse_args()
    rows = [json.loads(line) for line in args.file.read_text().splitlines() if line.strip()]
    if not rows:
        raise SystemExit(f"{args.file}: no lines (was EDGESTREAM_TEST_CPU set for the run?)")
    total = sum(r["cpu_s"] or 0.0 for r in rows)
    wall = sum(r["wall_s"] or 0.0 for r in rows)
    print(f"{len(rows)} lines: CPU {total / 60:.1f} min, test wall (summed over workers) {wall / 60:.1f} min")
    files: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        f = files[r["test"].split("::")[0]]
        f[0] += 1
        f[1] += r["cpu_s"] or 0.0
        f[2] += r["wall_s"] or 0.0
    print(f"\n{'file':60s} {'tests':>5s} {'CPU s':>8s} {'share':>6s} {'wall s':>8s}")
    for name, (n, cpu, w) in sorted(files.items(), key=lambda kv: -kv[1][1])[:args.top]:
        print(f"{name:60s} {n:5d} {cpu:8.1f} {100 * cpu / total:5.1f}% {w:8.1f}")
    print(f"\n{'test':100s} {'CPU s':>7s} {'wall s':>7s}")
    for r in sorted(rows, key=lambda r: -(r["cpu_s"] or 0.0))[:args.top]:
        print(f"{r['test'][:100]:100s} {r['cpu_s'] or 0.0:7.1f} {r['wall_s'] or 0.0:7.1f}")


if __name__ == "__main__":
    main()
