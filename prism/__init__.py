"""prism — PRISM (ReSymNet reward redistribution + SymReg) for multi-objective RL on PyTorch Lightning."""

__version__ = "0.1.0"
