"""Fitting a learned reward model on segment sums (docs/method.md §4): the shared driver and its recipe
(:mod:`~prism.reward.fitting.fit`), the LightningModule it drives (:mod:`~prism.reward.fitting.trajectory_sum_module`),
the loop's seam (:mod:`~prism.reward.fitting.fitter`), a population's stacked fit
(:mod:`~prism.reward.fitting.stacked`) and the fit's loggers, clock and per-network AdamW."""
