"""What a simulated run adds to the one summary schema (runner.summary): its virtual time, compute model, replica
layout, compute path, PS and the wall-time profile of where the simulator's time went."""

from __future__ import annotations

from typing import Any


def wall_profile(sim: Any, wall_s: float) -> dict[str, float]:
    """Wall seconds of `sim` (a SimEngine after its run) by category; `engine` is the rest (SimPy, dispatch,
    bookkeeping, logging)."""
    prof = {**sim.replicas.wall, "reduce": sim.collectives.reduce_s, **sim.stats.wall,
            "algorithm": float(sim.stats.driver.get("algorithm", 0.0))}
    prof["engine"] = max(0.0, wall_s - sum(prof.values()))
    return {k: round(v, 4) for k, v in prof.items()}


def sim_summary(sim: Any, wall_s: float) -> dict[str, Any]:
    """The run's time and stop reason, then the simulator's own summary keys (runner.summary's rule: read
    only for simulated runs; virtual_time_s is time_s, kept for the tools that read it); wall_s: the run's
    wall time."""
    prof = wall_profile(sim, wall_s)
    cm = sim.compute_model
    torch_s = prof["forward_backward"] + prof["optimizer"] + prof["eval"] + prof["reduce"]
    outside = max(0.0, wall_s - torch_s - prof["algorithm"])
    return {
        "time_s": float(sim.env.now),
        "sim_wall_s": round(wall_s, 3),
        "algorithm": sim.spec.name,
        "devices": sim.world,
        "stop_reason": sim.stop_reason or "finished",
        **({"error": str(sim.diverged)} if sim.diverged is not None else {}),
        **({"loss_warning": sim.loss_growth.warning} if sim.loss_growth.warning else {}),
        "virtual_time_s": round(float(sim.env.now), 6),
        "device_steps": sim.stats.device_steps,
        "buffer_final_samples": int(sum(sim.last_backlog)),
        "buffer_final_max_samples": int(max(sim.last_backlog)),
        "held_final_samples": int(sum(sim.last_held)),
        "held_final_max_samples": int(max(sim.last_held)),
        "acked_samples": sim.stats.acked_samples,
        "injected_bytes_total": sim.stats.inject_bytes,
        "compute_model": {"a_s": cm.a, "c_s": cm.c, "static": list(cm.static), "dynamic": cm.dynamic,
                          "calibrated": sim.calibrated},
        "num_params": sim.replicas.num_params,
        "compute_path": sim.compute_mode,
        "compute_reason": sim.compute_reason,
        **({"compute_passes": sim.batcher.passes} if sim.batcher is not None else {}),
        **sim.replicas.layout(),
        "replicas_identical": sim.replicas.identical(),
        **({"ps": sim.ps.summary()} if sim.ps is not None else {}),
        "wall_profile_s": prof,
        "overhead_share": round(outside / wall_s, 4) if wall_s > 0 else None,
        "device_steps_per_wall_s": round(sim.stats.device_steps / wall_s, 2) if wall_s > 0 else None,
    }
