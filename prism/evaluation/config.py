"""The evaluation protocol's config (docs/method.md §9): periodic and final protocols, seeds, workers.

Plain dataclasses: importing this module (as :mod:`prism.config` does) pulls in neither Lightning nor
multiprocessing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from prism.core import checks
from prism.core.seeding import derive_seed

__all__ = ["EvalConfig", "FinalEvalConfig"]


@dataclass
class FinalEvalConfig:
    """The protocol of the evaluation at the end of every run; defaults are the paper's (docs/method.md §9)."""

    num_weights: int = 100
    """Evaluation weights of the final evaluation (energy reference directions, as ``eval.num_weights``)."""
    episodes: int = 5
    """Episodes per weight of the final evaluation."""
    each_cycle: bool = False
    """Also run this protocol at the end of every cycle but the last (at env steps M, 2M, …), as rows flagged
    ``cycle_end = 1`` in ``eval.csv``. The authors' released code compares an oracle trained for one cycle of M
    steps with PRISM trained for IR cycles: with this on, one run over IR cycles gives both budgets' final
    evaluations (a fit-free run's policy at M is the one a run of M steps would end with). Off by default: it
    costs one final evaluation per extra cycle."""

    def __post_init__(self) -> None:
        # At least one weight per objective is a cross-part rule (prism.config.validate).
        checks.positive("eval.final.num_weights", self.num_weights)
        checks.positive("eval.final.episodes", self.episodes)


@dataclass
class EvalConfig:
    """The evaluation protocol (docs/method.md §9); defaults are the paper's."""

    every: int = 10_000
    """Evaluate every this many env steps (read from the agent's ``env_steps``) with the periodic protocol
    below; the end of fit is always evaluated with ``final``."""
    num_weights: int = 100
    """Evaluation weights of the periodic evaluations: pymoo's energy reference directions (seed 42) for L
    objectives. May be lighter than ``final`` (they only draw the learning curves)."""
    episodes: int = 5
    """Episodes per evaluation weight of the periodic evaluations (the per-weight mean and population std
    are over these)."""
    gamma: float = 0.99
    """Discount of the returns the metrics use (undiscounted returns are recorded too)."""
    eum_weights: int = 50
    """Equally spaced weights (energy method, seed 42) over which EUM averages."""
    vo_preferences: int = 50
    """Random preference vectors p ∈ Δ^{2L−1} over which VO averages."""
    preference_seed: int = 42
    """Seed of the VO preferences; fixed across evaluations and runs so values stay comparable."""
    seed: int | None = None
    """Base seed of the evaluation episodes' env resets (the same episodes at every evaluation of a run);
    ``None`` = ``derive_seed(run seed, "eval")``, so start states vary with the run seed. An integer fixes
    them for every run seed."""
    num_workers: int = -1
    """Worker processes stepping env copies beside the main process; −1 = auto (CPUs − 1, at most 3, for
    MuJoCo envs; none for pure-Python envs), 0 = all in this process."""
    final: FinalEvalConfig = field(default_factory=FinalEvalConfig)
    """The protocol of the evaluation at the end of every run (``front.csv``, ``summary.json``, the row
    flagged ``final`` in ``eval.csv``)."""

    def __post_init__(self) -> None:
        # At least one weight per objective is a cross-part rule (prism.config.validate).
        checks.positive("eval.every", self.every)
        checks.positive("eval.num_weights", self.num_weights)
        checks.positive("eval.episodes", self.episodes)
        if self.seed is not None:
            checks.non_negative("eval.seed", self.seed)

    def reset_seed(self, run_seed: int = 0) -> int:
        """The base reset seed: ``seed`` when set, else derived from ``run_seed``."""
        return int(self.seed) if self.seed is not None else derive_seed(run_seed, "eval")

    def resolved(self, run_seed: int) -> EvalConfig:
        """A copy whose ``seed`` is the concrete base reset seed of a run seeded with ``run_seed``."""
        return dataclasses.replace(self, seed=self.reset_seed(run_seed))

    def final_protocol(self) -> EvalConfig:
        """This config with the final evaluation's weight and episode counts."""
        return dataclasses.replace(self, num_weights=self.final.num_weights, episodes=self.final.episodes)

    def final_equals_periodic(self) -> bool:
        """Whether the final protocol is the periodic one (then a periodic result can stand in for it)."""
        return (self.num_weights, self.episodes) == (self.final.num_weights, self.final.episodes)
