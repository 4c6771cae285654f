"""prism.loop: the PRISM loop itself (paper Algorithm 1), the layer above the agents, rewards and evaluation.

- :mod:`~prism.loop.phases`: the phase machine (collection, reward fits, shaping) as a callback on the agent's
  Trainer, :class:`~prism.loop.phases.PrismLoopCallback`;
- :mod:`~prism.loop.fit_phase`: its fit phase (every member's fit, resumable from a snapshot, each fit's record);
- :mod:`~prism.loop.loop_state`: where the loop is (saved in every checkpoint) and what it runs by;
- :mod:`~prism.loop.diagnostics`: the shaped-vs-true figure.

What it shows in the terminal while it runs (a bar per phase, or plain lines when stderr is a log) is
:mod:`prism.display`.

The run around it (folders, checkpoints, lock, clock, outputs, ``prism fit`` / ``prism evaluate``) is
:mod:`prism.run`. The evaluation protocol lives in :mod:`prism.evaluation`; its public names are re-exported
here for the callers that import them from ``prism.loop``, lazily: importing this package imports none of the
submodules above, nor Lightning.
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
submodule (``prism.run.continuation``, ``prism.run.layout``) must not import Lightning through this file, so
that ``prism fit --resume`` and ``prism evaluate`` refuse bad arguments at once."""

__all__ = sorted(_REEXPORTS)


def __getattr__(name: str) -> Any:
    module = _REEXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
