"""GPI-PD (Alegre et al., AAMAS 2023), continuous actions: config, networks, losses, prioritised replay and
GPI-LS weight support. The Dyna dynamics model lives in ``dynamics.py`` (separate module).

The names below are imported on first access (PEP 562), so importing this package (as the config loader
does) pulls in neither torch nor Lightning.
"""

from __future__ import annotations

from prism.core._lazy import lazy_exports

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


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())


__all__ = sorted(_LAZY)
