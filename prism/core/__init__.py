"""The shared helpers every part of prism may use, at the bottom of the import layers: the errors that stop a
run on purpose (:mod:`~prism.core.errors`), named random streams (:mod:`~prism.core.seeding`), the config
dataclasses' field checks (:mod:`~prism.core.checks`), the ``device`` / ``deterministic`` keys
(:mod:`~prism.core.devices`), Ctrl-C during a fit (:mod:`~prism.core.interrupt`), where a run's time goes
(:mod:`~prism.core.phase_clock`), freed heap pages back to the system (:mod:`~prism.core.memory`), the
TensorBoard writer (:mod:`~prism.core.tb_writer`), the headless OpenGL backend
(:mod:`~prism.core.gl_backend`), the stacked linear layer every stacked network is built of
(:mod:`~prism.core.stacked_linear`) and small private helpers (:mod:`~prism.core._lazy`,
:mod:`~prism.core._text`, :mod:`~prism.core._warnings`). A module here imports nothing of prism outside
this package."""
