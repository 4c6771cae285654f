"""Environment layer: specs (shipped, or derived from any multi-objective gymnasium env) with optional
symmetry sets, the sparse-reward wrapper, a fast toy env."""

from prism.envs.derive import derive_env_spec, resolve_env_spec
from prism.envs.factory import make_env
from prism.envs.registry import TOY_SPEC, get_env_spec, register_env_spec, registered_env_ids
from prism.envs.spec import EnvSpec, SpecError
from prism.envs.toy import TOY_ENV_ID, ToyReflectionEnv
from prism.envs.wrappers import SparseRewardWrapper, release_probabilities

__all__ = [
    "TOY_ENV_ID",
    "TOY_SPEC",
    "EnvSpec",
    "SparseRewardWrapper",
    "SpecError",
    "ToyReflectionEnv",
    "derive_env_spec",
    "get_env_spec",
    "make_env",
    "register_env_spec",
    "registered_env_ids",
    "release_probabilities",
    "resolve_env_spec",
]
