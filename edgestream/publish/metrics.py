"""What a model version says of how good it is: `version_metrics`, the one place a version's metrics are made.

The host passes what the run's latest figures are when the version is made, as a dict with the keys
"heldout" (the task's held-out metrics: the latest eval line's, e.g. {"accuracy", "loss"} or {"rmse", "mae",
"loss"}, with the step and time they were taken at) and "prequential" (the test-then-train figures of the
training stream, when the run computes them: eval.prequential / drift). Either may be missing or None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

KEYS = ("heldout", "prequential")


def _plain(v: Any) -> Any:
    """JSON-safe: finite numbers, strings, lists and dicts of them; NaN / infinity -> None."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float) or hasattr(v, "__float__") and not isinstance(v, (list, tuple, dict)):
        try:
            f = float(v)
        except (TypeError, ValueError):
            return str(v)
        return f if math.isfinite(f) else None
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


def version_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """{"heldout": ..., "prequential": ...} of `metrics` (module doc), JSON-safe; a key not given is None."""
    return {k: (_plain(metrics[k]) if metrics.get(k) is not None else None) for k in KEYS}
