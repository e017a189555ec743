"""The demo's scenario (make demo): a typical heterogeneous S1 draw, and the claim line it prints."""

from __future__ import annotations

import pytest

from edgestream.comparisons import parse_variants
from edgestream.demo import DDL_BATCH, PAPER_S1_SPEEDUP, VARIANTS, claim_line, demo_config
from edgestream.runner.plan import RunPlan


def test_demo_rates_are_a_heterogeneous_s1_draw():
    plan = RunPlan.resolve(demo_config())
    rates = [plan.rate_model.base_rate(i) for i in range(plan.world)]
    assert [round(r) for r in rates] == [59, 14, 52, 66]  # the draw the module doc describes
    assert max(rates) / min(rates) > 4  # the slowest stream makes DDL wait: the papers' scenario
    assert DDL_BATCH / min(rates) > 1.5  # seconds DDL waits per step, more than ScaDLES' one-second take


@pytest.mark.parametrize("ddl_t, sca_t, expect", [
    (34.0, 16.0, "real 2.12x"),
    (10.0, 20.0, "real 0.50x"),
    (None, 16.0, "real - (DDL did not reach the target)"),
    (None, None, "real - (DDL and ScaDLES did not reach the target)"),
])
def test_claim_line_states_paper_and_ours(ddl_t, sca_t, expect):
    variants = parse_variants(VARIANTS)
    real = {variants[0].label: {"time_to_target_s": ddl_t}, variants[1].label: {"time_to_target_s": sca_t}}
    sim = {variants[0].label: {"time_to_target_s": 30.0}, variants[1].label: {"time_to_target_s": 15.0}}
    line = claim_line(real, sim, variants)
    assert expect in line and "simulated 2.00x" in line and f"{PAPER_S1_SPEEDUP:.2f}x" in line
