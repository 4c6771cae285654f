"""The batched rollout of the evaluation protocol (docs/method.md §9): :func:`evaluate_policy` and :func:`evaluate_agent`.

:func:`evaluate_policy` runs **every** (weight, episode) pair of the protocol as one batched rollout: one env
copy per pair (in an :class:`~prism.evaluation.pool.EvalEnvPool`), all stepped in lock-step with **one**
policy forward per step for all live envs. An env that terminates or is truncated stops (it is never stepped
again and adds nothing more). Rewards are the true dense reward vectors; for each pair we record the
discounted return ``Σ_t γ^t r_t`` (γ = 0.99; what the metrics use) and the undiscounted return ``Σ_t r_t``.
Per weight: mean and population std over episodes; the metrics are computed by
:class:`~prism.evaluation.result.EvalResult`. Optionally the mean equivariance error
``E_s ‖μ(L_g s, w) − K_g μ(s, w)‖₁`` of the policy's pre-tanh mean μ over every state visited during the
evaluation (:func:`prism.agents.symmetry.per_state_equivariance_error`).

While stepping on the CPU, torch's intra-op threads are limited to one: their OpenMP workers busy-wait after
each forward and starved the env stepping (171 → 1186 µs per env step measured with two torch threads on
this 2-core machine).

Seeding: pair ``k = i·episodes + e`` (weight i, episode e) resets its env with ``pair_seeds(seed, K)[k]``,
so an evaluation is reproducible and independent of batching and of the worker split. In a run the base
seed defaults to ``derive_seed(run_seed, "eval")``: the start states differ between run seeds (so the
spread over seeds includes start-state variability) and are the same at every evaluation of one run.

Protocols: the periodic evaluations (``every`` env steps; the learning curves) use ``num_weights ×
episodes``; the evaluation at the end of every run uses ``final`` (the paper's 100 weights × 5 episodes by
default), is flagged ``final = 1`` in ``eval.csv`` and logged under ``eval_final/``
(:class:`~prism.evaluation.callback.EvaluationCallback`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from prism.agents.contract import PopulationAgent
from prism.agents.symmetry import per_state_equivariance_error, reflection_from_spec
from prism.envs.spec import EnvSpec
from prism.evaluation.config import EvalConfig
from prism.evaluation.pool import EvalEnvPool
from prism.evaluation.result import EvalResult
from prism.metrics import functional as F

__all__ = ["ActFn", "evaluate_agent", "evaluate_policy", "pair_seeds"]

ActFn = Callable[[Tensor, Tensor], Tensor]
"""``act_fn(obs [B, obs_dim], weight [B, L]) -> action [B, act_dim]`` (deterministic)."""


def pair_seeds(seed: int, n: int) -> list[int]:
    """The env reset seeds of ``n`` (weight, episode) pairs: distinct, deterministic in ``seed``."""
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(n, dtype=np.uint32)]


def _resolve_weights(weights: int | np.ndarray | Tensor, n_objectives: int) -> np.ndarray:
    if isinstance(weights, int):
        return F.equally_spaced_weights(n_objectives, weights)
    if isinstance(weights, Tensor):
        weights = weights.detach().cpu().numpy()
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2 or w.shape[1] != n_objectives:
        raise ValueError(f"weights: expected [W, {n_objectives}], got shape {w.shape}")
    return w


@torch.no_grad()
def evaluate_policy(
    act_fn: ActFn,
    spec: EnvSpec,
    weights: int | np.ndarray | Tensor = 100,
    episodes: int = 5,
    gamma: float = 0.99,
    seed: int = 12345,
    *,
    mean_fn: ActFn | None = None,
    eum_weights: int | np.ndarray = 50,
    vo_preferences: int | np.ndarray = 50,
    preference_seed: int = 42,
    device: torch.device | str = "cpu",
    pool: EvalEnvPool | None = None,
    num_workers: int = -1,
    on_episodes: Callable[[int], None] | None = None,
) -> EvalResult:
    """Evaluate a weight-conditioned deterministic policy on every (weight, episode) pair at once.

    Args:
        act_fn: ``act_fn(obs [B, obs_dim], weight [B, L]) -> action [B, act_dim]``, deterministic. Called
            once per env step with every live env's observation (float32 tensors on ``device``).
        spec: the env; its plain dense env (``spec.make()``) is used unless ``pool`` brings its own.
        weights: ``[W, L]`` evaluation weights, or a count for equally spaced (energy) weights.
        episodes: episodes per weight.
        gamma: discount of the returns used by the metrics.
        seed: base seed of the env resets (see :func:`pair_seeds`).
        mean_fn: optional ``mean_fn(obs, weight) -> pre-tanh mean [B, act_dim]``; when given and the spec has a
            symmetry table, the mean equivariance error ``‖μ(L_g s, w) − K_g μ(s, w)‖₁`` is averaged over
            every visited state (an env without one has no L_g, K_g: the error is left empty).
        eum_weights: count (equally spaced) or ``[|Ω|, L]`` weights for EUM.
        vo_preferences: count (seeded random, ``preference_seed``) or ``[M, 2L]`` preferences for VO.
        device: where the observation and weight tensors are put.
        pool: env copies to reuse across calls (the caller closes it); a temporary one otherwise.
        num_workers: worker processes of a temporary pool (−1 = auto, see :class:`EvalEnvPool`).
        on_episodes: optional ``on_episodes(k)``, called when ``k`` episodes have just ended (a progress bar).
    """
    start = time.perf_counter()
    if not spec.has_symmetry:
        mean_fn = None  # no reflection to measure equivariance against
    n_obj = spec.n_objectives
    w = _resolve_weights(weights, n_obj)
    n_weights = w.shape[0]
    n_pairs = n_weights * episodes
    eum_w = F.equally_spaced_weights(n_obj, eum_weights) if isinstance(eum_weights, int) else eum_weights
    prefs = (
        F.random_preferences(n_obj, vo_preferences, preference_seed)
        if isinstance(vo_preferences, int)
        else vo_preferences
    )

    own_pool = pool is None
    pool = pool or EvalEnvPool(spec, num_workers=num_workers)
    torch_threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)  # see the module docstring: spinning OpenMP workers starve the envs
    try:
        # pair k = i * episodes + e  ->  weight i, episode e
        pair_w = torch.as_tensor(np.repeat(w, episodes, axis=0), dtype=torch.float32, device=device)
        obs = pool.reset(pair_seeds(seed, n_pairs))
        disc_ret = np.zeros((n_pairs, n_obj))
        undisc_ret = np.zeros((n_pairs, n_obj))
        discount = np.ones(n_pairs)
        lengths = np.zeros(n_pairs, dtype=np.int64)
        max_steps = spec.max_episode_steps
        pitch = spec.pitch_obs
        cos_pitch = np.zeros(n_pairs)  # Σ_t cos(pitch of s_t), the flip diagnostic (EvalResult.upright)

        if mean_fn is not None:
            reflection = reflection_from_spec(spec, device)
            eq_sum = torch.zeros((), dtype=torch.float64, device=device)  # summed on device: no per-step sync
            eq_count = 0

        idx = np.arange(n_pairs)
        while idx.size:
            all_alive = idx.size == n_pairs
            obs_t = torch.as_tensor(obs[idx], device=device)
            w_t = pair_w if all_alive else pair_w[torch.as_tensor(idx, device=device)]
            actions = act_fn(obs_t, w_t).detach().to("cpu", torch.float32).numpy()
            if mean_fn is not None:
                errors = per_state_equivariance_error(mean_fn, obs_t, w_t, *reflection)
                eq_sum += errors.sum().double()
                eq_count += idx.size

            if pitch is not None:
                cos_pitch[idx] += np.cos(obs[idx, pitch])
            next_obs, reward, terminated, truncated = pool.step(idx, actions)
            undisc_ret[idx] += reward
            disc_ret[idx] += discount[idx, None] * reward
            discount[idx] *= gamma
            lengths[idx] += 1
            obs[idx] = next_obs
            # a finished env is never stepped again; the length cap guards envs without a time limit
            done = terminated | truncated | (lengths[idx] >= max_steps)
            idx = idx[~done]
            if on_episodes is not None and done.any():
                on_episodes(int(done.sum()))

        eq_err = None
        if mean_fn is not None:
            eq_err = float(eq_sum.item() / max(eq_count, 1))
    finally:
        torch.set_num_threads(torch_threads)
        if own_pool:
            pool.close()

    return EvalResult.from_returns(
        w,
        disc_ret.reshape(n_weights, episodes, n_obj),
        undisc_ret.reshape(n_weights, episodes, n_obj),
        lengths.reshape(n_weights, episodes),
        gamma=gamma,
        ref_point=spec.ref_point,
        eum_weights=np.asarray(eum_w),
        vo_preferences=np.asarray(prefs),
        equivariance_error=eq_err,
        wall_time=time.perf_counter() - start,
        upright=None if pitch is None else (cos_pitch / np.maximum(lengths, 1)).reshape(n_weights, episodes),
    )


def evaluate_agent(
    agent: PopulationAgent,
    spec: EnvSpec,
    cfg: EvalConfig,
    pool: EvalEnvPool | None = None,
    member: int = 0,
    on_episodes: Callable[[int], None] | None = None,
) -> EvalResult:
    """The protocol of docs/method.md §9 with ``cfg`` on one member of an agent.

    The agent (the agent contract, :mod:`prism.agents.contract`) is evaluated through ``act_member`` /
    ``policy_mean_member`` of member ``member``. The agent is put in eval mode for the rollout and restored afterwards. An unresolved ``cfg.seed``
    (``None``) means run seed 0; runs pass a config resolved with :meth:`EvalConfig.resolved`.
    """
    act_fn = lambda o, w: agent.act_member(member, o, w)  # noqa: E731
    mean_fn = lambda o, w: agent.policy_mean_member(member, o, w)  # noqa: E731
    was_training = agent.training
    agent.eval()
    try:
        return evaluate_policy(
            act_fn,
            spec,
            weights=cfg.num_weights,
            episodes=cfg.episodes,
            gamma=cfg.gamma,
            seed=cfg.reset_seed(),
            mean_fn=mean_fn,
            eum_weights=cfg.eum_weights,
            vo_preferences=cfg.vo_preferences,
            preference_seed=cfg.preference_seed,
            device=agent.device,
            pool=pool,
            on_episodes=on_episodes,
        )
    finally:
        agent.train(was_training)
