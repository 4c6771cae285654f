"""Experiment grids behind ``prism reproduce``: envs × arms × seeds of ``prism fit`` runs and their reports.

One concern per module: :mod:`~prism.experiments.grid` (arms, presets, cells), :mod:`~.studies` (study files,
conf/studies/*.yaml, read into presets), :mod:`~.runner` (jobs on the local or Ray backend), :mod:`~.collect`
(reading finished runs), :mod:`~.stats` (mean ± SE, ratios, the rliable aggregate), :mod:`~.tables` and
:mod:`~.fits` (the report's tables), :mod:`~.plots` (figures), :mod:`~.report` (writing it all) and :mod:`~.cli`
(the command line). Nothing here is imported by ``import prism``.
"""
