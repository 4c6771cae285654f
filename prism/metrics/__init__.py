"""MORL metrics (docs/method.md §9): Pareto filtering, hypervolume, EUM, VO, as plain functions on return tables.

The same HV, EUM and VO as ``torchmetrics.Metric`` classes, accumulating an evaluation's returns, are in
:mod:`prism.metrics.classes` (not imported here, so importing the functions stays light)."""

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
