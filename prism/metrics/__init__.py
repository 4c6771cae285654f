"""MORL metrics (SPEC §9): Pareto filtering, hypervolume, EUM, VO — functional and as torchmetrics."""

from prism.metrics.functional import (
    cardinality,
    equally_spaced_weights,
    expected_utility,
    hypervolume,
    pareto_front,
    random_preferences,
    variance_objective,
)
from prism.metrics.metric import Cardinality, ExpectedUtility, Hypervolume, VarianceObjective

__all__ = [
    "Cardinality",
    "ExpectedUtility",
    "Hypervolume",
    "VarianceObjective",
    "cardinality",
    "equally_spaced_weights",
    "expected_utility",
    "hypervolume",
    "pareto_front",
    "random_preferences",
    "variance_objective",
]
