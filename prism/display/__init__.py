"""prism.display: what a run shows in the terminal, apart from what it computes (nothing here draws random
numbers or changes a number of the run).

- :mod:`~prism.display.progress`: a bar per phase (RL over env steps; collection, reward fit and evaluation
  over their own units), :class:`~prism.display.progress.Progress` being the interface the loop and the run
  talk to;
- :mod:`~prism.display.progress_lines`: the same as plain lines when stderr is a log file or a pipe, and
  :func:`~prism.display.progress_lines.make_progress`, which picks one (``prism fit --progress``).
"""
