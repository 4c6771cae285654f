"""A fixed two-weight evaluation result on the toy env, for tests of what is shown around an evaluation
(progress bars and lines) without running one: test_progress.py and test_rough_edges.py patch
``prism.evaluation.callback.evaluate_agent`` to return it."""

from __future__ import annotations

import numpy as np

from prism.envs import TOY_SPEC
from prism.evaluation.config import EvalConfig
from prism.evaluation.result import EvalResult
from prism.metrics import functional as F


def fake_eval_result() -> tuple[EvalConfig, EvalResult]:
    """``(config, result)``: 2 weights × 1 episode with returns ``[[0, 1]], [[2, 3]]``."""
    cfg = EvalConfig(num_weights=2, episodes=1, eum_weights=4, vo_preferences=4)
    returns = np.arange(4.0).reshape(2, 1, 2)
    result = EvalResult.from_returns(
        np.eye(2),
        returns,
        returns,
        np.ones((2, 1)),
        gamma=0.99,
        ref_point=TOY_SPEC.ref_point,
        eum_weights=F.equally_spaced_weights(2, 4),
        vo_preferences=F.random_preferences(2, 4, cfg.preference_seed),
    )
    return cfg, result
