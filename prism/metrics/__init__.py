"""MORL metrics (docs/method.md §9): Pareto filtering, hypervolume, EUM, VO, as plain functions on return tables."""

from prism.metrics.functional import (
    cardinality,
    equally_spaced_weights,
    expected_utility,
    hypervolume,
    pareto_front,
    random_preferences,
    variance_objective,
)

__all__ = [
    "cardinality",
    "equally_spaced_weights",
    "expected_utility",
    "hypervolume",
    "pareto_front",
    "random_preferences",
    "variance_objective",
]
