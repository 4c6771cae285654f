"""Environment specifications: ids, objectives, sparse channel, reflection symmetry, HV reference point.

One :class:`EnvSpec` per supported environment (docs/method.md §2). The reflection symmetry is the pair
(L_g, K_g): L_g negates the *symmetric* observation indices and leaves the asymmetric ones alone, K_g
negates the symmetric action indices (every action dimension in the MuJoCo tasks). Both are diagonal
±1 matrices, hence involutions.

An env may have **no** symmetry table: its three index fields are ``None`` and
:attr:`EnvSpec.has_symmetry` is False. That is never the same as an identity reflection: asking such a spec
for L_g or K_g is an error, and so is a positive SymReg λ, so SymReg can never silently be a zero term.

Where a run's spec comes from (:func:`prism.envs.derive.resolve_env_spec`):

1. the registry (:mod:`prism.envs.registry`: the paper's four MuJoCo tasks and the toy env), or else
2. :func:`~prism.envs.derive.derive_env_spec`: any gymnasium / mo-gymnasium id whose env has a rank-1 Box
   observation space, a bounded Box action space and a ``reward_space`` — sizes, objectives and time limit
   are read off the env; sparse channel 0, λ = 0, HV reference point −100 per objective, no symmetry;
3. then the fields of a user's ``env.spec`` mapping replace those of that base spec one by one (so a
   partial mapping, e.g. just the symmetry table and λ, is enough for an env prism does not ship).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field
from typing import Any

import numpy as np

from prism.envs import toy  # noqa: F401  (registers the toy env's gymnasium id, which make may build)

DEFAULT_REF_VALUE = -100.0
"""Per-objective HV reference value of a spec that gives none (the paper's value for the MuJoCo tasks)."""

DEFAULT_MAX_EPISODE_STEPS = 1000
"""Time limit of a derived spec whose env is registered without one."""

SYMMETRY_HINT = "give env.spec.symmetric_obs / asymmetric_obs / symmetric_act (see docs/custom_env.md)"
"""How to supply a reflection symmetry table; ends the errors about a missing one."""


class SpecError(ValueError):
    """A malformed environment spec; the message names the offending field."""


@dataclass(frozen=True)
class EnvSpec:
    """Everything prism needs to know about a multi-objective environment.

    Attributes:
        id: gymnasium / mo-gymnasium id passed to ``mo_gymnasium.make`` (``module:Env-v0`` imports
            ``module`` first, so an env registered by the user's own package works too).
        objective_names: one name per reward channel (its length is the number of objectives L).
        obs_dim: observation size.
        act_dim: action size.
        sparse_channel: default channel made sparse by the wrapper (docs/method.md §2).
        symmetric_obs: observation indices negated by the reflection L_g; ``None`` = the env has no
            reflection symmetry table (then ``asymmetric_obs`` and ``symmetric_act`` are ``None`` too).
        asymmetric_obs: observation indices left unchanged by L_g. Together with ``symmetric_obs`` they
            partition ``range(obs_dim)``; ``None`` next to a given ``symmetric_obs`` = its complement.
        symmetric_act: action indices negated by K_g (all of them in every MuJoCo task); ``None`` exactly
            when ``symmetric_obs`` is.
        ref_point: hypervolume reference point, one value per objective; ``None`` = −100 each (the
            paper's value for the MuJoCo tasks, :data:`DEFAULT_REF_VALUE`).
        symreg_lambda: the paper's SymReg weight λ for this env (docs/method.md §7); must be 0 without a symmetry
            table.
        max_episode_steps: time limit (episodes are truncated there).
        pitch_obs: observation index of the body's pitch angle (radians), for the flip diagnostic of the
            evaluations: an episode whose mean cos(pitch) is below 0 spent most of its steps on its back
            (``flipped_fraction`` in eval.csv); ``None``: not measured (an env that ends at a fall never flips).
        make_kwargs: extra keyword arguments for ``make``.
    """

    id: str
    objective_names: tuple[str, ...]
    obs_dim: int
    act_dim: int
    sparse_channel: int = 0
    symmetric_obs: tuple[int, ...] | None = None
    asymmetric_obs: tuple[int, ...] | None = None
    symmetric_act: tuple[int, ...] | None = None
    ref_point: tuple[float, ...] | None = None
    symreg_lambda: float = 0.0
    max_episode_steps: int = DEFAULT_MAX_EPISODE_STEPS
    pitch_obs: int | None = None
    make_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Normalise sequences to tuples so specs built from YAML lists compare and hash like built-ins.
        for name in ("objective_names", "symmetric_obs", "asymmetric_obs", "symmetric_act", "ref_point"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        if self.ref_point is None:
            object.__setattr__(self, "ref_point", (DEFAULT_REF_VALUE,) * len(self.objective_names))
        if self.symmetric_obs is not None and self.asymmetric_obs is None:
            symmetric = set(self.symmetric_obs)
            object.__setattr__(
                self, "asymmetric_obs", tuple(i for i in range(self.obs_dim) if i not in symmetric)
            )
        object.__setattr__(self, "make_kwargs", dict(self.make_kwargs))
        self.validate()

    @property
    def n_objectives(self) -> int:
        """Number of reward channels L."""
        return len(self.objective_names)

    @property
    def has_symmetry(self) -> bool:
        """Whether the spec carries a reflection symmetry table (L_g, K_g); SymReg and the exactly
        equivariant actor need one."""
        return self.symmetric_obs is not None

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
        self._validate_symmetry()
        assert self.ref_point is not None  # filled in by __post_init__
        if len(self.ref_point) != self.n_objectives:
            raise SpecError(
                f"env.ref_point: has {len(self.ref_point)} values for {self.n_objectives} objectives"
            )
        if self.symreg_lambda < 0:
            raise SpecError(f"env.symreg_lambda: must be >= 0, got {self.symreg_lambda}")
        if self.symreg_lambda > 0 and not self.has_symmetry:
            raise SpecError(
                f"env.symreg_lambda: {self.symreg_lambda} needs a reflection symmetry table and "
                f"{self.id} has none; {SYMMETRY_HINT} or set env.spec.symreg_lambda=0"
            )
        if self.max_episode_steps <= 0:
            raise SpecError(f"env.max_episode_steps: must be positive, got {self.max_episode_steps}")

    def _validate_symmetry(self) -> None:
        """The three index sets: all absent (no symmetry), or a partition of the observation indices plus
        the action indices, describing a non-identity reflection."""
        given = {
            "symmetric_obs": self.symmetric_obs is not None,
            "asymmetric_obs": self.asymmetric_obs is not None,
            "symmetric_act": self.symmetric_act is not None,
        }
        if not any(given.values()):
            return
        if not given["symmetric_obs"]:
            present = [name for name, ok in given.items() if ok]
            raise SpecError(
                f"env.symmetric_obs: missing, but {' and '.join(present)} is given; a reflection symmetry "
                "table needs symmetric_obs and symmetric_act (asymmetric_obs defaults to the rest)"
            )
        if not given["symmetric_act"]:
            raise SpecError(
                "env.symmetric_act: missing, but symmetric_obs is given; a reflection symmetry table needs "
                "the action indices K_g negates too"
            )
        assert self.symmetric_obs is not None and self.asymmetric_obs is not None
        assert self.symmetric_act is not None
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
        if not self.symmetric_obs and not self.symmetric_act:
            # An identity "reflection" would make SymReg identically 0 without anyone noticing.
            raise SpecError(
                "env.symmetric_obs: symmetric_obs and symmetric_act are both empty, i.e. the identity; "
                "for an env without a symmetry leave all three index fields out"
            )

    # ---- reflection operators -------------------------------------------------------------------
    def _require_symmetry(self) -> None:
        if not self.has_symmetry:
            raise SpecError(f"env.symmetric_obs: {self.id} has no reflection symmetry table; {SYMMETRY_HINT}")

    def obs_reflection(self) -> np.ndarray:
        """Diagonal of L_g as a float32 vector of ±1 (−1 on the symmetric observation indices).

        Raises :class:`SpecError` when the spec has no symmetry table (see :attr:`has_symmetry`).
        """
        self._require_symmetry()
        sign = np.ones(self.obs_dim, dtype=np.float32)
        sign[list(self.symmetric_obs or ())] = -1.0
        return sign

    def act_reflection(self) -> np.ndarray:
        """Diagonal of K_g as a float32 vector of ±1 (−1 on the symmetric action indices).

        Raises :class:`SpecError` when the spec has no symmetry table (see :attr:`has_symmetry`).
        """
        self._require_symmetry()
        sign = np.ones(self.act_dim, dtype=np.float32)
        sign[list(self.symmetric_act or ())] = -1.0
        return sign

    # ---- construction ---------------------------------------------------------------------------
    def make(self, **kwargs: Any):
        """Build the (dense, multi-objective) env and check its sizes against this spec.

        A bounded Box action space other than [−1, 1] is rescaled to [−1, 1]
        (``gymnasium.wrappers.RescaleAction``) here rather than in :func:`prism.envs.make_env`, so the
        training, collection and evaluation envs (evaluation builds from ``spec.make``) all act in the
        [−1, 1] box CAPQL's tanh policy covers. An unbounded action space is a :class:`SpecError`.
        """
        merged = {**self.make_kwargs, **kwargs}
        merged.setdefault("max_episode_steps", self.max_episode_steps)
        env = _make_raw(self.id, merged)
        env = _unit_actions(env, self.id)
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

    def with_fields(self, data: Mapping[str, Any]) -> EnvSpec:
        """A copy with the fields of a user's ``env.spec`` mapping replacing this spec's (validated again).

        Unknown fields are an error naming the key; ``id`` may only repeat this spec's id (it is set by
        ``env.id``). Fields not in ``data`` keep this spec's values.
        """
        _check_known_fields(data)
        if "id" in data and data["id"] != self.id:
            raise SpecError(f"env.spec.id: set the env with env.id (got {data['id']!r} next to {self.id!r})")
        return EnvSpec(**{**asdict(self), **dict(data)})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvSpec:
        """Build a spec from a config mapping; unknown fields are an error naming the key."""
        _check_known_fields(data)
        required = [
            f
            for f, d in cls.__dataclass_fields__.items()
            if d.default is MISSING and d.default_factory is MISSING
        ]
        missing = [f for f in required if f not in data]
        if missing:
            raise SpecError(f"env.{missing[0]}: required env-spec field is missing")
        return cls(**dict(data))


def _check_known_fields(data: Mapping[str, Any]) -> None:
    known = set(EnvSpec.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise SpecError(f"env.{unknown[0]}: unknown env-spec field (known: {', '.join(sorted(known))})")


def _make_raw(env_id: str, kwargs: Mapping[str, Any]):
    """``mo_gymnasium.make`` for ``mo-`` ids, ``gymnasium.make`` otherwise (env checker off: vector rewards
    are fine for us, not for gymnasium's passive checker)."""
    import gymnasium as gym
    import mo_gymnasium as mo_gym

    if env_id.startswith("mo-"):
        return mo_gym.make(env_id, **kwargs)
    return gym.make(env_id, **{"disable_env_checker": True, **kwargs})


def _unit_actions(env, env_id: str):
    """``env`` acting in [−1, 1]: unchanged if its Box already is, else wrapped in ``RescaleAction``."""
    import gymnasium as gym

    space = env.action_space
    if not isinstance(space, gym.spaces.Box):
        raise SpecError(f"env.id: {env_id} has a {type(space).__name__} action space; prism needs a Box")
    low, high = np.asarray(space.low, dtype=np.float64), np.asarray(space.high, dtype=np.float64)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise SpecError(
            f"env.id: {env_id} has unbounded actions [{low.tolist()}, {high.tolist()}]; CAPQL's tanh policy "
            "needs finite bounds to rescale to [-1, 1]"
        )
    if np.array_equal(low, -np.ones_like(low)) and np.array_equal(high, np.ones_like(high)):
        return env
    return gym.wrappers.RescaleAction(env, np.float32(-1.0), np.float32(1.0))
