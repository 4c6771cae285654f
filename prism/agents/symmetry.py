"""Reflection-symmetry operators (L_g, K_g), orbit averaging and the equivariance error (docs/method.md §7).

L_g and K_g are diagonal ±1 matrices taken from the env spec (:meth:`EnvSpec.obs_reflection`,
:meth:`EnvSpec.act_reflection`); we keep them as sign vectors and apply them by elementwise product. Both are
involutions, so the group is {1, g} and the orbit average of a map f is ``½(f(s) + K f(L s))``.
The preference weight w is not transformed: the reflection leaves every reward channel unchanged.

SymReg's λ and the rule that ties it to the table live here too: :func:`symreg_lambda` is the one place a
null ``agent.symreg_lambda`` becomes the env spec's λ, and :func:`check_symmetry_table` the one statement of
"SymReg and the exact actor need a reflection table".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from prism.envs.spec import SYMMETRY_HINT, EnvSpec


class Reflection(NamedTuple):
    """Diagonals of L_g (``obs_sign``, ``[obs_dim]``) and K_g (``act_sign``, ``[act_dim]``) as ±1 tensors."""

    obs_sign: torch.Tensor
    act_sign: torch.Tensor


def symreg_lambda(configured: float | None, spec: EnvSpec) -> float:
    """SymReg's λ for a configured ``agent.symreg_lambda``: the value itself, or the env spec's λ when it is
    null (0 on an env without a symmetry table, so SymReg is then off).

    :func:`prism.config.load_config` resolves a run's λ with it once, into the typed config; a backbone built
    in Python from a config that leaves λ null falls back on it, so the two can never disagree."""
    return float(spec.symreg_lambda if configured is None else configured)


def check_symmetry_table(spec: EnvSpec, symreg_lambda: float, symmetry_mode: str = "regularise") -> None:
    """Raise ``ValueError`` (one line, starting with the key) when the backbone needs a reflection table the
    spec lacks: SymReg with λ > 0 (``symmetry_mode: regularise``, the only mode of a backbone without the key)
    or the exactly equivariant actor (``symmetry_mode: exact``). ``none`` needs nothing."""
    if spec.has_symmetry:
        return
    if symmetry_mode == "exact":
        raise ValueError(
            f"agent.symmetry_mode: exact needs a reflection symmetry table and {spec.id} has none; "
            f"{SYMMETRY_HINT} or set agent.symmetry_mode=regularise"
        )
    if symmetry_mode == "regularise" and symreg_lambda > 0:
        raise ValueError(
            f"agent.symreg_lambda: {spec.id} has no reflection symmetry table; {SYMMETRY_HINT} "
            "or set agent.symreg_lambda=0"
        )


def reflection_from_spec(spec: EnvSpec, device: torch.device | str | None = None) -> Reflection:
    """The spec's (L_g, K_g) as float32 sign vectors on ``device``."""
    return Reflection(
        torch.as_tensor(spec.obs_reflection(), device=device),
        torch.as_tensor(spec.act_reflection(), device=device),
    )


def reflect_obs(obs: torch.Tensor, obs_sign: torch.Tensor) -> torch.Tensor:
    """``L_g s`` for a batch ``[..., obs_dim]``."""
    return obs * obs_sign


def reflect_act(action: torch.Tensor, act_sign: torch.Tensor) -> torch.Tensor:
    """``K_g a`` for a batch ``[..., act_dim]`` (also applies to the pre-tanh mean, tanh being odd)."""
    return action * act_sign


def with_reflected(
    obs: torch.Tensor, weight: torch.Tensor, obs_sign: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cat([s, L s]), cat([w, w]))`` along the batch dimension (``-2``), so one forward pass runs both
    branches: rows ``[..., :B, :]`` of the output belong to ``s``, rows ``[..., B:, :]`` to ``L s``."""
    return torch.cat([obs, reflect_obs(obs, obs_sign)], dim=-2), torch.cat([weight, weight], dim=-2)


class OrbitAveragedActor(nn.Module):
    """Exactly equivariant wrapper of a (mean, log-std) actor: the orbit average over {1, g} (paper §4).

    ``μ_eq(s, w) = ½(μ(s, w) + K μ(L s, w))`` and ``ℓ_eq(s, w) = ½(ℓ(s, w) + ℓ(L s, w))``, so
    ``μ_eq(L s) = K μ_eq(s)`` and ``ℓ_eq(L s) = ℓ_eq(s)`` hold for any base actor. Both branches run as one
    batch through the base network.
    """

    def __init__(self, base: nn.Module, obs_sign: torch.Tensor, act_sign: torch.Tensor):
        super().__init__()
        self.base = base
        self.register_buffer("obs_sign", obs_sign.clone().float(), persistent=False)
        self.register_buffer("act_sign", act_sign.clone().float(), persistent=False)

    def forward(
        self, obs: torch.Tensor, weight: torch.Tensor, member: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # [..., B, d]: the reflected copies are appended along the batch dimension (members untouched).
        n = obs.shape[-2]
        mean, log_std = self.base(*with_reflected(obs, weight, self.obs_sign), member=member)
        mean_eq = 0.5 * (mean[..., :n, :] + reflect_act(mean[..., n:, :], self.act_sign))
        log_std_eq = 0.5 * (log_std[..., :n, :] + log_std[..., n:, :])
        return mean_eq, log_std_eq


MeanFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def per_state_equivariance_error(
    mean_fn: MeanFn,
    obs: torch.Tensor,
    weight: torch.Tensor,
    obs_sign: torch.Tensor,
    act_sign: torch.Tensor,
) -> torch.Tensor:
    """Equivariance error ``‖μ(L s, w) − K μ(s, w)‖₁`` of a pre-tanh mean function, one per state ``[B]``.

    ``mean_fn(obs, weight) -> [B, act_dim]`` (e.g. :meth:`CAPQLModule.policy_mean`); both branches run as one
    batch. Stays on the device (no host sync), so a caller can accumulate sums over many batches.
    """
    n = obs.shape[-2]
    both = mean_fn(*with_reflected(obs, weight, obs_sign))
    return (both[..., n:, :] - reflect_act(both[..., :n, :], act_sign)).abs().sum(dim=-1)


def equivariance_error(
    mean_fn: MeanFn,
    obs: torch.Tensor,
    weight: torch.Tensor,
    obs_sign: torch.Tensor,
    act_sign: torch.Tensor,
) -> torch.Tensor:
    """Mean equivariance error ``mean_b ‖μ(L s, w) − K μ(s, w)‖₁`` of a pre-tanh mean function.

    ``mean_fn(obs, weight) -> [B, act_dim]`` (e.g. :meth:`CAPQLModule.policy_mean`). Returns a 0-d tensor
    (no host sync; call ``.item()`` yourself).
    """
    return per_state_equivariance_error(mean_fn, obs, weight, obs_sign, act_sign).mean()
