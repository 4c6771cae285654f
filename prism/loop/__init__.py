"""prism.loop: a whole ``prism fit`` / ``prism evaluate`` run, the layer above the agents, rewards and evaluation.

- :mod:`~prism.loop.run`: build a run from its config, train it, resume it; :mod:`~prism.loop.evaluate`: evaluate a finished one;
- :mod:`~prism.loop.phases`: the PRISM loop (collection, reward fits, shaping) as a callback on the agent's
  Trainer;
- :mod:`~prism.loop.checkpoint` / :mod:`~prism.loop.checkpoint_io`: whole-run checkpoints and their files;
- :mod:`~prism.loop.members`: the shapes of a built run (``Run``, ``Member``), shared by ``run`` and ``outputs``;
- :mod:`~prism.loop.outputs`, :mod:`~prism.loop.progress`, :mod:`~prism.loop.diagnostics`: a run's output
  files, its terminal display (a bar per phase), its TensorBoard figures;
- :mod:`~prism.loop.interrupt`: Ctrl-C during a fit as ``KeyboardInterrupt`` (``prism fit`` exits 130).

The evaluation protocol lives in :mod:`prism.evaluation`; its public names are re-exported here for the
callers that import them from ``prism.loop``. Importing this package imports none of the submodules above.
"""

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
