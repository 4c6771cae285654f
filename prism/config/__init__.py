"""The run config: typed dataclasses, loaded from YAML layers and ``key=value`` overrides with OmegaConf.

One concern per module, bottom to top (each imports only modules above it in this list):

- :mod:`~prism.config.methods` — what ``method`` names, the derived name, ``method_label``;
- :mod:`~prism.config.files` — reading one YAML layer (one-line errors), writing a run's config.yaml;
- :mod:`~prism.config.schema` — :class:`RunConfig` and its run-level parts (:class:`EnvConfig`,
  :class:`LoopConfig`); the parts' own dataclasses live with their parts;
- :mod:`~prism.config.agent_keys` — the ``agent.*`` keys of a config file vs the chosen backbone;
- :mod:`~prism.config.protocols` — the experimental protocols (``equal`` / ``released``);
- :mod:`~prism.config.validation` — the rules that tie parts together, and the env-spec lookups;
- :mod:`~prism.config.resolved` — what a run resolves at start for keys left ``null`` / ``auto``;
- :mod:`~prism.config.loader` — :func:`load_config`, which merges, applies the protocol and validates.

Validation happens once per rule: every dataclass checks its own fields in ``__post_init__`` (helpers in
:mod:`prism.core.checks`), and :func:`validate` checks only the rules between parts. Every failure is a
:class:`ConfigError` with a one-line message starting with the offending key. The names below are the public
API: ``from prism.config import load_config, RunConfig, ...``.
"""

from prism.config.files import same_run, to_yaml
from prism.config.loader import agent_config_class, load_config, load_run_config
from prism.config.methods import BUILTIN_METHODS, derive_method, run_label
from prism.config.protocols import apply_protocol, is_model_free_arm
from prism.config.resolved import resolved_values
from prism.config.schema import DEFAULT_AGENT, PROTOCOLS, EnvConfig, LoopConfig, RunConfig, member_seeds
from prism.config.validation import resolve_env_spec, sparse_channel, validate
from prism.core.devices import accelerator, torch_device
from prism.core.errors import ConfigError  # the config's error type

__all__ = [
    "BUILTIN_METHODS",
    "DEFAULT_AGENT",
    "PROTOCOLS",
    "ConfigError",
    "EnvConfig",
    "LoopConfig",
    "RunConfig",
    "accelerator",
    "agent_config_class",
    "apply_protocol",
    "derive_method",
    "is_model_free_arm",
    "load_config",
    "load_run_config",
    "member_seeds",
    "resolve_env_spec",
    "resolved_values",
    "run_label",
    "same_run",
    "sparse_channel",
    "to_yaml",
    "torch_device",
    "validate",
]
