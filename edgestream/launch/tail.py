"""Follow the trainers' `ranks/<rank>.jsonl` files as they grow (the live view) and read them whole
(the run directory's events.jsonl)."""

from __future__ import annotations

from pathlib import Path

from edgestream.runner.rundir import parse_line, rank_files


class JsonlTail:
    """New complete lines of one growing JSONL file, parsed; a partial last line waits for its newline."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self._partial = b""

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        if not data:
            return []
        self.offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        return [r for r in (parse_line(ln) for ln in lines if ln.strip()) if r is not None]


class RanksTail:
    """Every ranks/*.jsonl of a run, followed together: `read()` -> [(rank, record), ...] new since last."""

    def __init__(self, ranks_dir: Path, offsets: dict[int, int] | None = None) -> None:
        self.ranks_dir = ranks_dir
        self.offsets = offsets or {}
        self.tails: dict[int, JsonlTail] = {}

    def read(self) -> list[tuple[int, dict]]:
        for rank, path in rank_files(self.ranks_dir).items():
            self.tails.setdefault(rank, JsonlTail(path, self.offsets.get(rank, 0)))
        return [(rank, rec) for rank, t in sorted(self.tails.items()) for rec in t.read()]
