"""LaunchError: why a local run could not start or did not finish, in one line, with the exit status the
CLI ends with (edgestream/launch/)."""

from __future__ import annotations

from pathlib import Path


class LaunchError(RuntimeError):
    """A local run could not start or did not finish: `str()` is one line; `detail` the lines that
    follow it (a child's log tail); `code` the exit status the CLI ends with."""

    def __init__(self, message: str, code: int = 1, detail: list[str] | None = None,
                 run_dir: Path | None = None) -> None:
        super().__init__(" ".join(str(message).split()))
        self.code = code
        self.detail = detail or []
        self.run_dir = run_dir
