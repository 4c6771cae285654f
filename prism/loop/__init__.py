"""prism.loop: batched evaluation and its callback (the PRISM phase callback joins later)."""

from prism.loop.evaluation import (
    EvalConfig,
    EvalEnvPool,
    EvalResult,
    EvaluationCallback,
    FinalEvalConfig,
    evaluate_policy,
    front_figure,
    pair_seeds,
)

__all__ = [
    "EvalConfig",
    "EvalEnvPool",
    "EvalResult",
    "EvaluationCallback",
    "FinalEvalConfig",
    "evaluate_policy",
    "front_figure",
    "pair_seeds",
]
