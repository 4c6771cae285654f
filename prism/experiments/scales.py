"""The scales and study folders that several presets share (:mod:`prism.experiments.presets` and
:mod:`prism.experiments.table1_presets`)."""

from __future__ import annotations

CPU_MEDIUM_OVERRIDES = (
    "loop.cycles=2",
    "loop.steps_per_cycle=25000",
    "loop.checkpoint_every=5000",
    "loop.initial_episodes=1000",
    "loop.expert_episodes=50",
    "reward.max_epochs=100",
    "agent.buffer_size=200000",
    "eval.every=5000",
    "eval.num_weights=10",
    "eval.episodes=2",
    "eval.final.num_weights=100",
    "eval.final.episodes=5",
)
"""The cpu-medium scale (hopper: 2 × 25 000 RL steps, N = 1000, E = 50, ≤ 100 fit epochs, final 100 × 5)."""

PROTOCOL_STUDY_RUNS = "docs/results/protocol-study/runs"
"""The protocol study's committed run files (hopper at the cpu-medium scale), which later studies join."""
PROTOCOL_STUDY_EQUAL = ("e-oracle", "e-baseline", "e-prism", "e-uniform")
"""The protocol study's equal-budget arms."""
TABLE1_STUDY_RUNS = "docs/results/table1-study/runs"
"""table1-study's committed run files (walker2d, halfcheetah, swimmer at 2 × 25 000 steps)."""
HALFCHEETAH_PAPER_ARMS = ("e-oracle", "e-baseline", "e-uniform", "e-prism")
"""halfcheetah-paper's arms (the equal-budget arms of table1-study, at 2 × 100 000 steps)."""
HALFCHEETAH_PAPER_RUNS = "docs/results/halfcheetah-paper/runs"
"""halfcheetah-paper's committed run files (its peer arm, morl-baselines' CAPQL, is read from there too)."""
PEER_CAPQL_ARM = "morlb-capql"
"""morl-baselines' CAPQL on the oracle's dense reward, trained by ``tools/peer_capql_run.py`` (not ``prism fit``)
and evaluated by prism's protocol: a peer of the e-oracle arm (the same dense reward, another
implementation of CAPQL)."""
