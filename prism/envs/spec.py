"""Environment specifications: ids, objectives, sparse channel, reflection symmetry, HV reference point.

One :class:`EnvSpec` per supported environment (SPEC §2). The reflection symmetry is the pair
(L_g, K_g): L_g negates the *symmetric* observation indices and leaves the asymmetric ones alone, K_g
negates the symmetric action indices (every action dimension in the MuJoCo tasks). Both are diagonal
±1 matrices, hence involutions.

A user declares a spec for another env in a config with the same fields (see :meth:`EnvSpec.from_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field
from typing import Any

import numpy as np


class SpecError(ValueError):
    """A malformed environment spec; the message names the offending field."""


@dataclass(frozen=True)
class EnvSpec:
    """Everything prism needs to know about a multi-objective environment.

    Attributes:
        id: gymnasium / mo-gymnasium id passed to ``mo_gymnasium.make``.
        objective_names: one name per reward channel (its length is the number of objectives L).
        obs_dim: observation size.
        act_dim: action size.
        sparse_channel: default channel made sparse by the wrapper (SPEC §2).
        symmetric_obs: observation indices negated by the reflection L_g.
        asymmetric_obs: observation indices left unchanged by L_g. Together with ``symmetric_obs`` they
            partition ``range(obs_dim)``.
        symmetric_act: action indices negated by K_g (all of them in every MuJoCo task).
        ref_point: hypervolume reference point, one value per objective (−100 in the paper).
        symreg_lambda: the paper's SymReg weight λ for this env (SPEC §7).
        max_episode_steps: time limit (episodes are truncated there).
        make_kwargs: extra keyword arguments for ``make``.
    """

    id: str
    objective_names: tuple[str, ...]
    obs_dim: int
    act_dim: int
    sparse_channel: int
    symmetric_obs: tuple[int, ...]
    asymmetric_obs: tuple[int, ...]
    symmetric_act: tuple[int, ...]
    ref_point: tuple[float, ...]
    symreg_lambda: float
    max_episode_steps: int = 1000
    make_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Normalise sequences to tuples so specs built from YAML lists compare and hash like built-ins.
        for name in ("objective_names", "symmetric_obs", "asymmetric_obs", "symmetric_act", "ref_point"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "make_kwargs", dict(self.make_kwargs))
        self.validate()

    @property
    def n_objectives(self) -> int:
        """Number of reward channels L."""
        return len(self.objective_names)

    def validate(self) -> None:
        """Raise :class:`SpecError` naming the field if the spec is inconsistent."""
        if not self.id:
            raise SpecError("env.id: must be a non-empty string")
        if self.n_objectives < 2:
            raise SpecError(f"env.objective_names: need at least 2 objectives, got {self.n_objectives}")
        if self.obs_dim <= 0 or self.act_dim <= 0:
            raise SpecError(f"env.obs_dim/act_dim: must be positive, got {self.obs_dim}/{self.act_dim}")
        if not 0 <= self.sparse_channel < self.n_objectives:
            raise SpecError(
                f"env.sparse_channel: {self.sparse_channel} is out of range for {self.n_objectives} objectives"
            )
        for name, indices, size in (
            ("symmetric_obs", self.symmetric_obs, self.obs_dim),
            ("asymmetric_obs", self.asymmetric_obs, self.obs_dim),
            ("symmetric_act", self.symmetric_act, self.act_dim),
        ):
            bad = [i for i in indices if not (isinstance(i, (int, np.integer)) and 0 <= i < size)]
            if bad:
                raise SpecError(f"env.{name}: indices {bad} out of range [0, {size})")
            if len(set(indices)) != len(indices):
                raise SpecError(f"env.{name}: repeated indices in {list(indices)}")
        overlap = sorted(set(self.symmetric_obs) & set(self.asymmetric_obs))
        if overlap:
            raise SpecError(f"env.symmetric_obs: indices {overlap} are also listed in env.asymmetric_obs")
        missing = sorted(set(range(self.obs_dim)) - set(self.symmetric_obs) - set(self.asymmetric_obs))
        if missing:
            raise SpecError(
                f"env.symmetric_obs/asymmetric_obs: observation indices {missing} are in neither set"
            )
        if len(self.ref_point) != self.n_objectives:
            raise SpecError(
                f"env.ref_point: has {len(self.ref_point)} values for {self.n_objectives} objectives"
            )
        if self.symreg_lambda < 0:
            raise SpecError(f"env.symreg_lambda: must be >= 0, got {self.symreg_lambda}")
        if self.max_episode_steps <= 0:
            raise SpecError(f"env.max_episode_steps: must be positive, got {self.max_episode_steps}")

    # ---- reflection operators -------------------------------------------------------------------
    def obs_reflection(self) -> np.ndarray:
        """Diagonal of L_g as a float32 vector of ±1 (−1 on the symmetric observation indices)."""
        sign = np.ones(self.obs_dim, dtype=np.float32)
        sign[list(self.symmetric_obs)] = -1.0
        return sign

    def act_reflection(self) -> np.ndarray:
        """Diagonal of K_g as a float32 vector of ±1 (−1 on the symmetric action indices)."""
        sign = np.ones(self.act_dim, dtype=np.float32)
        sign[list(self.symmetric_act)] = -1.0
        return sign

    # ---- construction ---------------------------------------------------------------------------
    def make(self, **kwargs: Any):
        """Build the (dense, multi-objective) env and check its sizes against this spec."""
        import gymnasium as gym
        import mo_gymnasium as mo_gym

        from prism.envs import toy  # noqa: F401  (registers the toy env id)

        merged = {**self.make_kwargs, **kwargs}
        merged.setdefault("max_episode_steps", self.max_episode_steps)
        env = mo_gym.make(self.id, **merged) if self.id.startswith("mo-") else gym.make(self.id, **merged)
        self.check_env(env)
        return env

    def check_env(self, env) -> None:
        """Raise :class:`SpecError` if ``env``'s spaces disagree with the spec."""
        obs_shape = env.observation_space.shape
        if obs_shape != (self.obs_dim,):
            raise SpecError(f"env.obs_dim: spec says {self.obs_dim} but {self.id} observes {obs_shape}")
        act_shape = env.action_space.shape
        if act_shape != (self.act_dim,):
            raise SpecError(f"env.act_dim: spec says {self.act_dim} but {self.id} acts with {act_shape}")
        reward_space = getattr(env.unwrapped, "reward_space", None)
        if reward_space is not None and reward_space.shape != (self.n_objectives,):
            raise SpecError(
                f"env.objective_names: spec has {self.n_objectives} objectives but {self.id} "
                f"rewards {reward_space.shape}"
            )

    def replace(self, **changes: Any) -> EnvSpec:
        """A copy with some fields changed (validated again)."""
        return EnvSpec(**{**asdict(self), **changes})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvSpec:
        """Build a spec from a config mapping; unknown fields are an error naming the key."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"env.{unknown[0]}: unknown env-spec field (known: {', '.join(sorted(known))})")
        required = [
            f
            for f, d in cls.__dataclass_fields__.items()
            if d.default is MISSING and d.default_factory is MISSING
        ]
        missing = [f for f in required if f not in data]
        if missing:
            raise SpecError(f"env.{missing[0]}: required env-spec field is missing")
        return cls(**dict(data))


_REGISTRY: dict[str, EnvSpec] = {}


def register_env_spec(spec: EnvSpec, *, overwrite: bool = False) -> EnvSpec:
    """Add ``spec`` to the registry under ``spec.id``."""
    if spec.id in _REGISTRY and not overwrite:
        raise SpecError(f"env.id: a spec for {spec.id!r} is already registered")
    _REGISTRY[spec.id] = spec
    return spec


def get_env_spec(env_id: str) -> EnvSpec:
    """The registered spec for ``env_id``; an unknown id is a :class:`SpecError` listing the known ones."""
    try:
        return _REGISTRY[env_id]
    except KeyError:
        raise SpecError(
            f"env.id: unknown env {env_id!r} (registered: {', '.join(sorted(_REGISTRY))})"
        ) from None


def registered_env_ids() -> list[str]:
    return sorted(_REGISTRY)


def _complement(indices: Sequence[int], size: int) -> tuple[int, ...]:
    return tuple(i for i in range(size) if i not in set(indices))


# ---- the paper's four MuJoCo tasks (SPEC §2 and the paper's appendix tables; λ from SPEC §7) ---------
# Which parts of these tables are exact simulator symmetries and which are heuristic is checked against the
# MuJoCo models in tests/test_symmetry_physics.py and written up in docs/symmetry.md. The values are the
# paper's and stay as they are; the comments say what physics makes of them.

# mo-hopper-v5, obs = qpos[1:] ++ qvel = (z, torso angle, thigh, leg, foot angles, vx, vz, torso spin,
# thigh, leg, foot angular velocities). L_g negates the three joints' angles and velocities and keeps the torso.
# HEURISTIC: not a simulator symmetry. Thigh and leg bend one way only ([-150°, 0]), so L_g maps legal states
# outside the joint limits, and even with the limits off (and in flight) one step misses the mirrored next
# state by ~0.7 of the step's size. No reflection of the x-z world keeps vx and gravity.
register_env_spec(
    EnvSpec(
        id="mo-hopper-v5",
        objective_names=("forward", "jump", "energy"),
        obs_dim=11,
        act_dim=3,
        sparse_channel=0,
        symmetric_obs=(2, 3, 4, 8, 9, 10),
        asymmetric_obs=(0, 1, 5, 6, 7),
        symmetric_act=(0, 1, 2),
        ref_point=(-100.0, -100.0, -100.0),
        symreg_lambda=0.01,
    )
)
# mo-walker2d-v5, obs = qpos[1:] ++ qvel = (z, torso angle, right thigh/leg/foot, left thigh/leg/foot angles,
# vx, vz, torso spin, right then left joint angular velocities). L_g negates all six joints, keeps the torso.
# HEURISTIC, for the same reasons as the hopper (one-sided knee/thigh limits; ~0.7 of a step off in flight).
# The walker's EXACT symmetry is the left/right leg swap (obs 2-4 <-> 5-7, 11-13 <-> 14-16, actions 0-2 <-> 3-5,
# to round-off even through ground contacts), a permutation that this ±1 diagonal table cannot express.
register_env_spec(
    EnvSpec(
        id="mo-walker2d-v5",
        objective_names=("forward", "energy"),
        obs_dim=17,
        act_dim=6,
        sparse_channel=0,
        symmetric_obs=(2, 3, 4, 5, 6, 7, 11, 12, 13, 14, 15, 16),
        asymmetric_obs=(0, 1, 8, 9, 10),
        symmetric_act=tuple(range(6)),
        ref_point=(-100.0, -100.0),
        symreg_lambda=1.0,
    )
)
# mo-halfcheetah-v5, obs = qpos[1:] ++ qvel = (z, torso angle, back thigh/shin/foot, front thigh/shin/foot
# angles, vx, vz, torso spin, the six joint angular velocities). L_g negates all six joints, keeps the torso.
# HEURISTIC: the front and back legs differ (geometry, gears, springs), four of the six joint ranges are not
# symmetric about 0, and one step in flight misses the mirrored next state by ~0.2 of the step's size.
register_env_spec(
    EnvSpec(
        id="mo-halfcheetah-v5",
        objective_names=("forward", "energy"),
        obs_dim=17,
        act_dim=6,
        sparse_channel=0,
        symmetric_obs=(2, 3, 4, 5, 6, 7, 11, 12, 13, 14, 15, 16),
        asymmetric_obs=(0, 1, 8, 9, 10),
        symmetric_act=tuple(range(6)),
        ref_point=(-100.0, -100.0),
        symreg_lambda=0.01,
    )
)
# mo-swimmer-v5, obs = qpos[2:] ++ qvel = (tip angle, rotor 1, rotor 2 angles, vx, vy, tip angular velocity,
# rotor 1, rotor 2 angular velocities). The reflection y -> -y across the swimming direction is an EXACT
# simulator symmetry (bit-for-bit, rewards included): it negates obs 0,1,2,4,5,6,7 and keeps obs 3 (vx).
# The paper's L_g keeps obs 0 and 5 as well, so it is NOT a simulator symmetry: it is exact only at states with
# zero tip angle and spin, and even there it gets the sign of the next tip angle and spin wrong.
register_env_spec(
    EnvSpec(
        id="mo-swimmer-v5",
        objective_names=("forward", "energy"),
        obs_dim=8,
        act_dim=2,
        sparse_channel=0,
        symmetric_obs=(1, 2, 4, 6, 7),
        asymmetric_obs=(0, 3, 5),
        symmetric_act=(0, 1),
        ref_point=(-100.0, -100.0),
        symreg_lambda=0.005,
    )
)
