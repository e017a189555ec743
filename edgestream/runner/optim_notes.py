"""The warnings `edgestream config validate`, `edgestream run` and `edgestream.load_config` print about a config:
one line per optimizer setting it sets that its algorithm will not use (the run plan, runner/plan.py, is the rest of
the config's one reading)."""

from __future__ import annotations

from typing import Any

from edgestream.sync.registry import get_algorithm


def optimizer_notes(cfg: Any) -> list[str]:
    """One line per optimizer setting the config sets (explicitly: defaults are not the user's expectation)
    that its algorithm will not use, printed as warnings by the CLI: the workers' optim.momentum /
    weight_decay under a PS algorithm whose workers push gradients (the PS applies them with
    optim.server), optim.server settings an algorithm fixes itself or has no parameter server for.
    Unknown algorithm names: none (the config check names them)."""
    from edgestream.sync.ps_worker import gradient_worker

    try:
        spec = get_algorithm(cfg.algorithm.name)
    except ValueError:
        return []
    o, name, out = cfg.optim, spec.name, []
    given = o.model_fields_set
    server = {k: float(getattr(o.server, k)) for k in ("momentum", "weight_decay")
              if "server" in given and k in o.server.model_fields_set and getattr(o.server, k)}
    if spec.coordinator is None:
        return [f"optim.server.{k}: {v:g} is not used by {name} (a collective algorithm: there is no parameter "
                "server)" for k, v in server.items()]
    if spec.worker is gradient_worker:
        here = ", ".join(f"{k} {float(getattr(o.server, k)):g}" for k in ("momentum", "weight_decay"))
        for key in ("momentum", "weight_decay"):
            value = float(getattr(o, key))
            if key in given and value:
                out.append(f"optim.{key}: {value:g} is not used by {name}: its workers push gradients and the "
                           f"parameter server applies them with optim.server ({here}; plain SGD by default, as "
                           f"in the papers); set optim.server.{key} for {key.replace('_', ' ')} at the server, "
                           f"or optim.{key}: 0")
    for key, value in server.items():
        fixed = getattr(spec.coordinator, f"server_{key}", None)
        if fixed is not None:
            out.append(f"optim.server.{key}: {value:g} is not used by {name}: its parameter server "
                       f"uses {key.replace('_', ' ')} {fixed:g} (the workers' optim.{key} acts in their local "
                       "steps)")
    return out
