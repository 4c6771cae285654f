"""The presets of this round's studies: ``fit-cost`` (issue 61: a PRISM seed's cost with the fast fit, and its
swimmer gate)."""

from __future__ import annotations

from prism.experiments.grid import Arm, CostGate, JoinedArms, Preset, Ratio
from prism.experiments.scales import CPU_MEDIUM_OVERRIDES, TABLE1_STUDY_RUNS

FAST_FIT_OVERRIDES = ("reward.loss=randomized", "reward.val_every=5", "reward.warm_start=true")
"""``conf/fit/fast.yaml`` as overrides (tests/test_fit_cost_preset.py checks that the two agree)."""

FIT_COST = Preset(
    envs=("swimmer",),
    methods=("e-prism-fastfit", "e-prism-fast", "e-oracle"),
    seeds=tuple(range(5)),
    overrides=CPU_MEDIUM_OVERRIDES,
    arms=(
        # table1-study's e-prism-fast (N = 1000, the randomized loss) with the rest of the fast fit.
        Arm("e-prism-fastfit", "prism", "equal", FAST_FIT_OVERRIDES, per_seed=True),
        Arm("e-prism-fast", "prism", "equal", ("reward.loss=randomized",)),
        Arm("e-oracle", "oracle", "equal"),
    ),
    joined=(JoinedArms("swimmer", ("e-prism-fast", "e-oracle"), TABLE1_STUDY_RUNS, "table1-study"),),
    ratios=(
        Ratio("e-prism-fastfit", "e-prism-fast", "the fast fit's gate (HV ≥ 0.98)"),
        Ratio("e-prism-fastfit", "e-oracle", "equal budget"),
    ),
    cost_table=True,
    cost_gates=(CostGate("swimmer", "e-prism-fastfit", "e-oracle", 1.5),),
    description=(
        "A PRISM seed's cost with the fast fit (conf/fit/fast.yaml: the randomized loss, validation every "
        "5th epoch, refits warm-started from the previous cycle's members) on mo-swimmer-v5 at table1-study's "
        "budget: 2 × 25 000 RL steps, the equal-budget protocol, N = 1000 random and E = 50 expert episodes, "
        "ReSymNet ≤ 100 fit epochs (patience 20), final evaluation 100 weights × 5 episodes, 5 seeds. "
        "e-prism-fast (the randomized loss alone, N = 1000) and e-oracle are table1-study's runs, joined, "
        "not rerun. The gate: median CPU time ≤ 1.5 × e-oracle's, and mean final HV ≥ 0.98 × e-prism-fast's."
    ),
)
"""A PRISM seed with the fast fit, and its swimmer gate (docs/results/fit-cost)."""
