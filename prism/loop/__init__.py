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
callers that import them from ``prism.loop``, lazily: importing this package imports none of the submodules above,
nor Lightning.
"""

import importlib
from typing import Any

_REEXPORTS = {
    "EvalConfig": "prism.evaluation.config",
    "EvalEnvPool": "prism.evaluation.pool",
    "EvalResult": "prism.evaluation.result",
    "EvaluationCallback": "prism.evaluation.callback",
    "FinalEvalConfig": "prism.evaluation.config",
    "append_csv": "prism.evaluation.records",
    "eval_row": "prism.evaluation.records",
    "evaluate_agent": "prism.evaluation.rollout",
    "evaluate_policy": "prism.evaluation.rollout",
    "front_figure": "prism.evaluation.figure",
    "pair_seeds": "prism.evaluation.rollout",
}
"""The evaluation names re-exported here, each imported from its module on first use: importing a light
submodule (``prism.loop.continuation``, ``prism.loop.layout``) must not import Lightning through this file, so
that ``prism fit --resume`` and ``prism evaluate`` refuse bad arguments at once."""

__all__ = sorted(_REEXPORTS)


def __getattr__(name: str) -> Any:
    module = _REEXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
