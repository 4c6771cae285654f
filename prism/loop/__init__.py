"""prism.loop: the training loop of a run; re-exports the evaluation API of :mod:`prism.evaluation`."""

from prism.evaluation.callback import EvaluationCallback
from prism.evaluation.config import EvalConfig, FinalEvalConfig
from prism.evaluation.figure import front_figure
from prism.evaluation.pool import EvalEnvPool
from prism.evaluation.records import append_csv, eval_row
from prism.evaluation.result import EvalResult
from prism.evaluation.rollout import evaluate_agent, evaluate_policy, pair_seeds

__all__ = [
    "EvalConfig",
    "EvalEnvPool",
    "EvalResult",
    "EvaluationCallback",
    "FinalEvalConfig",
    "append_csv",
    "eval_row",
    "evaluate_agent",
    "evaluate_policy",
    "front_figure",
    "pair_seeds",
]
