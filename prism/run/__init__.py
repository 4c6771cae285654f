"""prism.run: a run's plumbing around the PRISM loop (:mod:`prism.loop`): what ``prism fit`` and ``prism
evaluate`` do with a run folder.

- :mod:`~prism.run.fit`: build a run from its config (agent, loop callback, evaluation, Trainer), train it,
  resume it; :mod:`~prism.run.evaluate`: evaluate a finished one;
- :mod:`~prism.run.members`: the shapes of a built run (``Run``, ``Member``), shared by ``fit`` and ``outputs``;
- :mod:`~prism.run.checkpoint` (the whole run's state, :class:`RunCheckpointer`) and
  :mod:`~prism.run.checkpoint_files` (file names, atomic writes, the damaged-file fallback);
- :mod:`~prism.run.continuation` (``--resume`` to more cycles), :mod:`~prism.run.lock` (one writer per run
  folder), :mod:`~prism.run.clock` (training time across a run's processes), :mod:`~prism.run.layout` (a run
  folder's file names), :mod:`~prism.run.outputs` (the
  final files), :mod:`~prism.run.hparams` (TensorBoard's HParams tab).

Importing this package imports none of them (nor Lightning): ``prism fit --resume`` and ``prism evaluate``
refuse bad arguments before anything heavy loads.
"""
