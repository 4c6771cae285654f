"""Capture and restore an env's full state mid-episode, so a resumed run continues bit for bit.

Walks the wrapper chain: the sparse wrapper's accumulator and release generator, TimeLimit's step count,
and the base env — the toy env's fields, what the env's own ``prism_get_state()`` returns (the hook for a
user's env: it returns tensors and plain values, ``prism_set_state(state)`` restores them), MuJoCo's full
integration state (``mj_getState(mjSTATE_INTEGRATION)``: positions, velocities, activations, controls,
warm-start accelerations, time …), or the numpy ``state`` array that classic-control envs (mountain car …)
keep everything in — plus the base env's ``np_random`` and the action space's sampler. Everything is
returned as tensors and plain Python values, so it saves with ``torch.save`` and loads with
``weights_only=True``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from prism.envs.toy import ToyReflectionEnv
from prism.envs.wrappers import SparseRewardWrapper


def rng_state(generator: np.random.Generator) -> dict[str, Any]:
    """A numpy Generator's bit-generator state (plain dict of ints and strings)."""
    return generator.bit_generator.state


def set_rng_state(generator: np.random.Generator, state: dict[str, Any]) -> None:
    generator.bit_generator.state = state


def _layers(env: gym.Env) -> list[gym.Env]:
    layers = [env]
    while hasattr(layers[-1], "env"):
        layers.append(layers[-1].env)
    return layers


def _mujoco_state(base) -> torch.Tensor:
    import mujoco

    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    state = np.empty(mujoco.mj_stateSize(base.model, spec), dtype=np.float64)
    mujoco.mj_getState(base.model, base.data, state, spec)
    return torch.from_numpy(state)


def _set_mujoco_state(base, state: torch.Tensor) -> None:
    import mujoco

    mujoco.mj_setState(
        base.model, base.data, state.numpy().astype(np.float64), mujoco.mjtState.mjSTATE_INTEGRATION
    )
    # Derived quantities (positions of bodies, contacts …) as the env would see them after a step.
    mujoco.mj_forward(base.model, base.data)


def get_env_state(env: gym.Env) -> dict[str, Any]:
    """Everything needed to continue ``env`` exactly where it is (see the module docstring)."""
    state: dict[str, Any] = {}
    for layer in _layers(env):
        if isinstance(layer, SparseRewardWrapper):
            state["sparse_accumulated"] = torch.from_numpy(layer._accumulated.copy())
            state["sparse_rng"] = rng_state(layer._rng)
        elif isinstance(layer, gym.wrappers.TimeLimit):
            state["elapsed_steps"] = int(layer._elapsed_steps or 0)
    base = env.unwrapped
    state["np_random"] = rng_state(base.np_random)
    state["action_space_rng"] = rng_state(env.action_space.np_random)
    if isinstance(base, ToyReflectionEnv):
        state["toy"] = torch.tensor([*base._p, *base._v, base._t], dtype=torch.float64)
    elif callable(getattr(base, "prism_get_state", None)):
        state["custom"] = base.prism_get_state()
    elif hasattr(base, "model") and hasattr(base, "data"):
        state["mujoco"] = _mujoco_state(base)
    elif isinstance(getattr(base, "state", None), np.ndarray):
        # Classic control: the whole physical state is this one array (its dtype is kept by torch).
        state["array_state"] = torch.from_numpy(np.array(base.state, copy=True))
    else:
        raise TypeError(
            f"get_env_state: cannot capture the state of {type(base).__name__}; give it prism_get_state / "
            "prism_set_state methods or add it to prism.envs.state"
        )
    return state


def set_env_state(env: gym.Env, state: dict[str, Any]) -> None:
    """Restore what :func:`get_env_state` captured (the env must have been reset once)."""
    for layer in _layers(env):
        if isinstance(layer, SparseRewardWrapper):
            layer._accumulated[:] = state["sparse_accumulated"].numpy()
            set_rng_state(layer._rng, state["sparse_rng"])
        elif isinstance(layer, gym.wrappers.TimeLimit):
            layer._elapsed_steps = state["elapsed_steps"]
    base = env.unwrapped
    set_rng_state(base.np_random, state["np_random"])
    set_rng_state(env.action_space.np_random, state["action_space_rng"])
    if "toy" in state:
        values = state["toy"].numpy()
        base._p, base._v, base._t = values[0:2].copy(), values[2:4].copy(), int(values[4])
    elif "custom" in state:
        base.prism_set_state(state["custom"])
    elif "array_state" in state:
        base.state = state["array_state"].numpy().copy()
    else:
        _set_mujoco_state(base, state["mujoco"])
