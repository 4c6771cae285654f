"""GPI-PD (Alegre et al., AAMAS 2023), continuous actions: config, networks, losses, prioritised replay and
GPI-LS weight support. The Dyna dynamics model lives in ``dynamics.py`` (separate module).

The names below are imported on first access (PEP 562), so importing this package (as the config loader
does) pulls in neither torch nor Lightning.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "GPIPDConfig": "prism.agents.gpi_pd.config",
    "DeterministicActor": "prism.agents.gpi_pd.networks",
    "VectorCritics": "prism.agents.gpi_pd.networks",
    "PrioritySampler": "prism.agents.gpi_pd.per",
    "GPILinearSupport": "prism.agents.gpi_pd.weight_support",
    "corner_weights": "prism.agents.gpi_pd.weight_support",
    "gpi_ls_priorities": "prism.agents.gpi_pd.weight_support",
}
"""Public name -> the module defining it (imported on first access)."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "DeterministicActor",
    "GPILinearSupport",
    "GPIPDConfig",
    "PrioritySampler",
    "VectorCritics",
    "corner_weights",
    "gpi_ls_priorities",
]
