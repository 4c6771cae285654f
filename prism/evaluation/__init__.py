"""prism.evaluation: the docs/method.md §9 evaluation protocol, one concern per module.

- :mod:`~prism.evaluation.config`: the protocol's config (``EvalConfig``, ``FinalEvalConfig``); imports
  neither Lightning nor multiprocessing, so :mod:`prism.config` can load it cheaply;
- :mod:`~prism.evaluation.pool`: env copies stepped in this process and in worker processes (``EvalEnvPool``);
- :mod:`~prism.evaluation.rollout`: the batched rollout (``evaluate_policy``, ``evaluate_agent``, ``pair_seeds``);
- :mod:`~prism.evaluation.result`: per-weight statistics and metrics (``EvalResult``);
- :mod:`~prism.evaluation.figure`: the Pareto-front figure (``front_figure``);
- :mod:`~prism.evaluation.records`: ``eval.csv`` rows (``eval_row``, ``append_csv``, ``truncate_eval_csv``);
- :mod:`~prism.evaluation.callback`: the thin Lightning callback (``EvaluationCallback``).

This package module imports none of them (so importing the config stays light); the public names are also
importable from :mod:`prism.loop`.
"""
