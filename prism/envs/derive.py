"""Specs of envs prism does not ship, read off the env itself, and the spec of a run.

:func:`resolve_env_spec` takes a run's spec from the registry (:mod:`prism.envs.registry`) or, for any other
gymnasium / mo-gymnasium id, from :func:`derive_env_spec`; then a user's ``env.spec`` fields replace the base
spec's one by one (see :mod:`prism.envs.spec`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

from prism.envs import toy  # noqa: F401  (registers the toy env's gymnasium id)
from prism.envs.registry import REGISTRY
from prism.envs.spec import (
    DEFAULT_MAX_EPISODE_STEPS,
    EnvSpec,
    SpecError,
    _check_known_fields,
    _make_raw,
    _unit_actions,
)
from prism.envs.state import get_env_state


def _is_known_gym_id(env_id: str) -> bool:
    """Whether gymnasium (with mo-gymnasium's and prism's ids registered) knows ``env_id``; a
    ``module:Env-v0`` id imports ``module`` first, as ``gymnasium.make`` does."""
    import gymnasium as gym
    import mo_gymnasium  # noqa: F401  (registers the mo- ids)

    module, _, name = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        gym.spec(name)
    except (gym.error.Error, ModuleNotFoundError):
        return False
    return True


def did_you_mean(env_id: str) -> str:
    """``"; did you mean 'mo-hopper-v5'?"`` for the id nearest to ``env_id`` among prism's specs and
    gymnasium's registered ids (mo-gymnasium's included), or ``""`` when none is close."""
    import gymnasium as gym
    import mo_gymnasium  # noqa: F401  (registers the mo- ids)

    from prism.core._text import did_you_mean as nearest

    # 0.8: among gymnasium's hundreds of ids a looser match suggests an unrelated env.
    return nearest(env_id, {*REGISTRY, *gym.registry}, cutoff=0.8)


def derive_env_spec(env_id: str, make_kwargs: Mapping[str, Any] | None = None) -> EnvSpec:
    """The spec of a gymnasium / mo-gymnasium env prism does not ship, read off the env itself.

    The env is built once (with ``make_kwargs``) and must have a rank-1 Box observation space, a Box action
    space with finite bounds (rescaled to [−1, 1] by :meth:`EnvSpec.make` when they differ) and a rank-1
    ``reward_space`` on the unwrapped env; prism must also be able to save its state mid-episode
    (:mod:`prism.envs.state`), since every run checkpoints. The derived spec has:

    - ``obs_dim``, ``act_dim`` and the objective count from those spaces;
    - ``objective_names`` from the unwrapped env's ``objective_names`` / ``reward_names`` attribute when it
      has one of the right length, else ``objective_0``, ``objective_1``, …;
    - ``sparse_channel`` 0, ``symreg_lambda`` 0 and **no** symmetry table (``has_symmetry`` False);
    - ``ref_point`` −100 per objective (:data:`DEFAULT_REF_VALUE`; set ``env.spec.ref_point`` for an env
      whose returns live on another scale);
    - ``max_episode_steps`` from the env's registration, or :data:`DEFAULT_MAX_EPISODE_STEPS`.

    Raises :class:`SpecError` (one line, starting with ``env.id``) when the id is unknown everywhere, the
    env cannot be built, or a requirement above fails.
    """
    import gymnasium as gym

    kwargs = dict(make_kwargs or {})
    if not _is_known_gym_id(env_id):
        raise SpecError(
            f"env.id: unknown env {env_id!r}: neither a prism spec "
            f"(registered: {', '.join(sorted(REGISTRY))}) nor a gymnasium / mo-gymnasium id"
            + did_you_mean(env_id)
        )
    try:
        env = _make_raw(env_id, kwargs)
    except Exception as err:  # missing optional dependencies (box2d, …) and bad kwargs come in many types
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SpecError(f"env.id: cannot build {env_id}: {first}") from None
    try:
        obs_space = env.observation_space
        if not (isinstance(obs_space, gym.spaces.Box) and len(obs_space.shape) == 1):
            raise SpecError(
                f"env.id: {env_id} observes {obs_space}; prism needs a rank-1 Box observation space"
            )
        act_space = _unit_actions(env, env_id).action_space
        if len(act_space.shape) != 1:
            raise SpecError(f"env.id: {env_id} acts with {act_space}; prism needs a rank-1 Box action space")
        reward_space = getattr(env.unwrapped, "reward_space", None)
        if reward_space is None or len(getattr(reward_space, "shape", None) or ()) != 1:
            raise SpecError(
                f"env.id: {env_id} has no vector reward_space on its unwrapped env; prism needs a "
                "multi-objective (mo-gymnasium style) env"
            )
        n_objectives = int(reward_space.shape[0])
        names = _objective_names(env.unwrapped, n_objectives)
        registered = env.spec.max_episode_steps if env.spec is not None else None
        _check_state_capture(env, env_id)
    finally:
        env.close()
    return EnvSpec(
        id=env_id,
        objective_names=names,
        obs_dim=int(obs_space.shape[0]),
        act_dim=int(act_space.shape[0]),
        max_episode_steps=int(registered) if registered else DEFAULT_MAX_EPISODE_STEPS,
        make_kwargs=kwargs,
    )


def _objective_names(base, n_objectives: int) -> tuple[str, ...]:
    for attribute in ("objective_names", "reward_names"):
        names = getattr(base, attribute, None)
        if (
            isinstance(names, Sequence)
            and not isinstance(names, str)
            and len(names) == n_objectives
            and all(isinstance(name, str) and name for name in names)
            and len(set(names)) == n_objectives
        ):
            return tuple(names)
    return tuple(f"objective_{i}" for i in range(n_objectives))


def _check_state_capture(env, env_id: str) -> None:
    """Every run checkpoints the env mid-episode: refuse an env whose state prism cannot capture now,
    not at the first checkpoint."""
    env.reset(seed=0)
    try:
        get_env_state(env)
    except TypeError:
        raise SpecError(
            f"env.id: prism cannot save the state of {env_id} ({type(env.unwrapped).__name__}) for its "
            "checkpoints; give the env prism_get_state / prism_set_state methods (see docs/custom_env.md)"
        ) from None


def resolve_env_spec(env_id: str, overrides: Mapping[str, Any] | None = None) -> EnvSpec:
    """The spec of a run: the registered one, or one derived from the env (:func:`derive_env_spec`), with
    the fields of ``overrides`` (a config's ``env.spec``) replacing the base spec's one by one.

    ``overrides["make_kwargs"]`` is also used to build the env a spec is derived from. An id that is
    neither registered nor known to gymnasium stays a one-line ``env.id: unknown env …`` error.
    """
    overrides = dict(overrides or {})
    _check_known_fields(overrides)
    if env_id in REGISTRY:
        base = REGISTRY[env_id]
    else:
        base = derive_env_spec(env_id, overrides.get("make_kwargs"))
    return base.with_fields(overrides) if overrides else base
