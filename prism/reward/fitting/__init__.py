"""Fitting a learned reward model on segment sums (docs/method.md §4): the shared driver
(:mod:`~prism.reward.fitting.fit`) and what a model brings to it (:mod:`~prism.reward.fitting.recipe`), the base
of every fit's LightningModule (:mod:`~prism.reward.fitting.network_fit`) with a lone fit's
(:mod:`~prism.reward.fitting.trajectory_sum_module`) and a population's stacked fit
(:mod:`~prism.reward.fitting.stacked`) as peers on it, the loop's seam (:mod:`~prism.reward.fitting.fitter`) and
the fit's loggers, clock and per-network AdamW."""
