"""prism — PRISM (ReSymNet reward redistribution + SymReg) for multi-objective RL on PyTorch Lightning.

``prism.load_run(run_dir)`` loads a trained run for use from Python (:mod:`prism.api`); it is imported on
first use, so ``import prism`` stays light."""

from prism.core._lazy import lazy_exports

__version__ = "0.1.0"

__getattr__, __dir__ = lazy_exports("prism", {"load_run": "prism.api", "LoadedRun": "prism.api"}, globals())
