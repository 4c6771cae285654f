"""Batched policy evaluation (SPEC §9) and the Lightning callback that runs it during training.

:func:`evaluate_policy` runs **every** (weight, episode) pair of the protocol as one batched rollout: one env
copy per pair, all stepped in lock-step with **one** policy forward per step for all live envs. An env that
terminates or is truncated stops (it is never stepped again and adds nothing more). Rewards are the true
dense reward vectors; for each pair we record the discounted return ``Σ_t γ^t r_t`` (γ = 0.99; what the
metrics use) and the undiscounted return ``Σ_t r_t``. Per weight: mean and population std over episodes.
Metrics (all maximised, :mod:`prism.metrics.functional`):

- **HV** of the Pareto-filtered per-weight mean (discounted) returns w.r.t. ``spec.ref_point``;
- **EUM**: mean over ``eum_weights`` equally spaced weights ω of ``max_{v ∈ front} ω·v``;
- **VO**: over ``vo_preferences`` seeded preferences p ∈ Δ^{2L−1},
  ``mean_p max_j (Σ_l p_l μ_jl − Σ_l p_{L+l} σ_jl)`` over **all** policies (before filtering);
- **cardinality**: the number of distinct points on the front;
- optionally the mean equivariance error ``E_s ‖μ(L_g s, w) − K_g μ(s, w)‖₁`` of the policy's pre-tanh mean μ
  over every state visited during the evaluation.

Env copies live in an :class:`EvalEnvPool`: for MuJoCo envs, whose physics dominates a step, a chunk stays
in this process and the others go to worker processes (see the class for the measurements that chose
processes over threads). While stepping on the CPU, torch's intra-op threads are limited to one: their
OpenMP workers busy-wait after each forward and starved the env stepping (171 → 1186 µs per env step
measured with two torch threads on this 2-core machine).

Seeding: pair ``k = i·episodes + e`` (weight i, episode e) resets its env with ``pair_seeds(seed, K)[k]``,
so an evaluation is reproducible and independent of batching and of the worker split. In a run the base
seed defaults to ``derive_seed(run_seed, "eval")``: the start states differ between run seeds (so the
spread over seeds includes start-state variability) and are the same at every evaluation of one run.

Protocols: the periodic evaluations (``every`` env steps; the learning curves) use ``num_weights ×
episodes``; the evaluation at the end of every run uses ``final`` (the paper's 100 weights × 5 episodes by
default), is flagged ``final = 1`` in ``eval.csv`` and logged under ``eval_final/``.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import math
import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from torch import Tensor

from prism.envs.spec import EnvSpec
from prism.metrics import functional as F
from prism.seeding import derive_seed

__all__ = [
    "EvalConfig",
    "EvalEnvPool",
    "EvalResult",
    "EvaluationCallback",
    "FinalEvalConfig",
    "append_csv",
    "evaluate_policy",
    "front_figure",
    "pair_seeds",
]

ActFn = Callable[[Tensor, Tensor], Tensor]
"""``act_fn(obs [B, obs_dim], weight [B, L]) -> action [B, act_dim]`` (deterministic)."""


@dataclass
class FinalEvalConfig:
    """The protocol of the evaluation at the end of every run; defaults are the paper's (SPEC §9)."""

    num_weights: int = 100
    """Evaluation weights of the final evaluation (energy reference directions, as ``eval.num_weights``)."""
    episodes: int = 5
    """Episodes per weight of the final evaluation."""


@dataclass
class EvalConfig:
    """The evaluation protocol (SPEC §9); defaults are the paper's."""

    every: int = 10_000
    """Evaluate every this many env steps (read from the agent's ``env_steps``) with the periodic protocol
    below; the end of fit is always evaluated with ``final``."""
    num_weights: int = 100
    """Evaluation weights of the periodic evaluations: pymoo's energy reference directions (seed 42) for L
    objectives. May be lighter than ``final`` (they only draw the learning curves)."""
    episodes: int = 5
    """Episodes per evaluation weight of the periodic evaluations (the per-weight mean and population std
    are over these)."""
    gamma: float = 0.99
    """Discount of the returns the metrics use (undiscounted returns are recorded too)."""
    eum_weights: int = 50
    """Equally spaced weights (energy method, seed 42) over which EUM averages."""
    vo_preferences: int = 50
    """Random preference vectors p ∈ Δ^{2L−1} over which VO averages."""
    preference_seed: int = 42
    """Seed of the VO preferences; fixed across evaluations and runs so values stay comparable."""
    seed: int | None = None
    """Base seed of the evaluation episodes' env resets (the same episodes at every evaluation of a run);
    ``None`` = ``derive_seed(run seed, "eval")``, so start states vary with the run seed. An integer fixes
    them for every run seed."""
    num_workers: int = -1
    """Worker processes stepping env copies beside the main process; −1 = auto (CPUs − 1, at most 3, for
    MuJoCo envs; none for pure-Python envs), 0 = all in this process."""
    final: FinalEvalConfig = field(default_factory=FinalEvalConfig)
    """The protocol of the evaluation at the end of every run (``front.csv``, ``summary.json``, the row
    flagged ``final`` in ``eval.csv``)."""

    def reset_seed(self, run_seed: int = 0) -> int:
        """The base reset seed: ``seed`` when set, else derived from ``run_seed``."""
        return int(self.seed) if self.seed is not None else derive_seed(run_seed, "eval")

    def resolved(self, run_seed: int) -> EvalConfig:
        """A copy whose ``seed`` is the concrete base reset seed of a run seeded with ``run_seed``."""
        return dataclasses.replace(self, seed=self.reset_seed(run_seed))

    def final_protocol(self) -> EvalConfig:
        """This config with the final evaluation's weight and episode counts."""
        return dataclasses.replace(self, num_weights=self.final.num_weights, episodes=self.final.episodes)

    def final_equals_periodic(self) -> bool:
        """Whether the final protocol is the periodic one (then a periodic result can stand in for it)."""
        return (self.num_weights, self.episodes) == (self.final.num_weights, self.final.episodes)


# ---- seeds and env pool -------------------------------------------------------------------------------------
def pair_seeds(seed: int, n: int) -> list[int]:
    """The env reset seeds of ``n`` (weight, episode) pairs: distinct, deterministic in ``seed``."""
    return [int(s) for s in np.random.SeedSequence(seed).generate_state(n, dtype=np.uint32)]


def _is_mujoco(env: gym.Env) -> bool:
    try:
        from gymnasium.envs.mujoco.mujoco_env import MujocoEnv
    except Exception:  # pragma: no cover - mujoco extra missing
        return False
    return isinstance(env.unwrapped, MujocoEnv)


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _step_envs(
    envs: Sequence[gym.Env], local: np.ndarray, actions: np.ndarray, n_objectives: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Step ``envs[local[j]]`` with ``actions[j]``: ``obs, true reward (float64), terminated, truncated``."""
    obs, rew, term, trunc = [], np.empty((len(local), n_objectives)), [], []
    for j, i in enumerate(local):
        o, r, te, tr, info = envs[i].step(actions[j])
        obs.append(o)
        # a wrapped env (e.g. the sparse wrapper) emits a different vector; score the true one
        rew[j] = info.get("true_reward", r)
        term.append(te)
        trunc.append(tr)
    return np.asarray(obs, dtype=np.float32), rew, np.asarray(term, bool), np.asarray(trunc, bool)


def _worker(conn: Connection, env_fn: Callable[[], gym.Env], n_envs: int, n_objectives: int) -> None:
    """A worker process: owns ``n_envs`` env copies and serves reset / step / close requests."""
    try:
        envs = [env_fn() for _ in range(n_envs)]
        conn.send(("ok", None))
        while True:
            command, payload = conn.recv()
            if command == "step":
                conn.send(("ok", _step_envs(envs, payload[0], payload[1], n_objectives)))
            elif command == "reset":
                obs = [envs[i].reset(seed=s)[0] for i, s in enumerate(payload)]
                conn.send(("ok", np.asarray(obs, dtype=np.float32)))
            else:
                for env in envs:
                    env.close()
                conn.send(("ok", None))
                return
    except (KeyboardInterrupt, EOFError):
        return
    except BaseException:
        conn.send(("error", traceback.format_exc()))


class EvalEnvPool:
    """Env copies for batched evaluation, reused across evaluations (building 500 MuJoCo envs takes seconds).

    Env ``k`` of the pool plays pair ``k``. The copies are split into contiguous chunks: the first stays in
    this process, each of ``num_workers`` worker processes owns one more; a step sends every worker its
    actions, steps the local chunk meanwhile, then gathers. ``num_workers=-1`` picks automatically:
    ``usable CPUs − 1`` (at most 3, and one per 64 envs) for MuJoCo envs, whose physics dominates a step,
    and 0 for cheap pure-Python envs, where the pipe round trip would eat the gain. Built from ``spec.make()`` (the plain
    dense env) unless ``env_fn`` is given; workers are forked where the platform allows (else spawned, and
    then ``env_fn`` must be picklable).

    Measured on this 2-core machine, mo-halfcheetah-v5, per env step: serial 116–190 µs, two stepping
    threads 76–83 µs when the machine was idle but 240–270 µs under load from other jobs (GIL convoy), two
    processes 85–103 µs idle and no worse than serial under load — hence processes, not threads.
    """

    def __init__(
        self,
        spec: EnvSpec,
        env_fn: Callable[[], gym.Env] | None = None,
        num_workers: int = -1,
        start_method: str | None = None,
    ) -> None:
        self.spec = spec
        self.env_fn = env_fn or spec.make
        self.envs: list[gym.Env] = []
        """The env copies living in this process (the first chunk)."""
        self.requested_workers = num_workers
        self.start_method = start_method
        self.capacity = 0
        self._bounds = np.zeros(1, dtype=np.int64)
        self._workers: list[tuple[Any, Connection]] = []

    @property
    def num_workers(self) -> int:
        """Worker processes currently running."""
        return len(self._workers)

    def ensure(self, n: int) -> None:
        """Make sure at least ``n`` env copies exist (a larger request rebuilds the pool)."""
        if n <= self.capacity:
            return
        self.close()
        first = self.env_fn()
        workers = self.requested_workers
        if workers < 0:
            # a worker pays only with enough envs to amortise its per-step round trip (and the
            # scheduler's wake-up latency when the machine is busy)
            workers = min(3, _usable_cpus() - 1, n // 64) if _is_mujoco(first) else 0
        workers = max(0, min(workers, n - 1))
        self._bounds = np.linspace(0, n, workers + 2).round().astype(np.int64)
        if workers:
            method = self.start_method or ("fork" if "fork" in mp.get_all_start_methods() else "spawn")
            ctx = mp.get_context(method)
            for c in range(1, workers + 1):
                parent, child = ctx.Pipe()
                size = int(self._bounds[c + 1] - self._bounds[c])
                proc = ctx.Process(
                    target=_worker, args=(child, self.env_fn, size, self.spec.n_objectives), daemon=True
                )
                proc.start()
                child.close()
                self._workers.append((proc, parent))
        # build the local chunk while the workers build theirs
        self.envs = [first] + [self.env_fn() for _ in range(int(self._bounds[1]) - 1)]
        for _, conn in self._workers:
            self._receive(conn)
        self.capacity = n

    @staticmethod
    def _receive(conn: Connection) -> Any:
        status, payload = conn.recv()
        if status != "ok":
            raise RuntimeError(f"evaluation env worker failed:\n{payload}")
        return payload

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        """Reset envs ``0..len(seeds)-1`` with the given seeds; their first observations ``[B, obs_dim]``."""
        n = len(seeds)
        self.ensure(n)
        for c, (_, conn) in enumerate(self._workers, start=1):
            lo, hi = self._bounds[c], min(self._bounds[c + 1], n)
            conn.send(("reset", list(seeds[lo:hi]) if hi > lo else []))
        local = [self.envs[i].reset(seed=s)[0] for i, s in enumerate(seeds[: self._bounds[1]])]
        parts = [np.asarray(local, dtype=np.float32).reshape(len(local), self.spec.obs_dim)]
        parts += [self._receive(conn).reshape(-1, self.spec.obs_dim) for _, conn in self._workers]
        return np.concatenate(parts)

    def step(
        self, indices: np.ndarray, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step env ``indices[j]`` with ``actions[j]`` (``indices`` ascending); returns ``obs, true_reward,
        terminated, truncated`` for those envs in the same order (float32, float64, bool, bool)."""
        cuts = np.searchsorted(indices, self._bounds)
        busy = []
        for c, (_, conn) in enumerate(self._workers, start=1):
            lo, hi = cuts[c], cuts[c + 1]
            if hi > lo:
                conn.send(("step", (indices[lo:hi] - self._bounds[c], actions[lo:hi])))
                busy.append(conn)
        parts = [_step_envs(self.envs, indices[: cuts[1]], actions[: cuts[1]], self.spec.n_objectives)]
        parts += [self._receive(conn) for conn in busy]
        obs = np.concatenate([p[0].reshape(-1, self.spec.obs_dim) for p in parts])
        rew, term, trunc = (np.concatenate([p[k] for p in parts]) for k in (1, 2, 3))
        return obs, rew, term, trunc

    def close(self) -> None:
        """Close every env and stop the worker processes."""
        for env in self.envs:
            env.close()
        self.envs = []
        for proc, conn in self._workers:
            try:
                conn.send(("close", None))
                conn.poll(5.0) and conn.recv()
            except (OSError, EOFError, BrokenPipeError):
                pass
            conn.close()
            proc.join(timeout=5.0)
            if proc.is_alive():
                proc.terminate()
        self._workers = []
        self.capacity = 0

    def __del__(self) -> None:  # best effort: do not leave worker processes behind
        with contextlib.suppress(Exception):
            self.close()


# ---- results ------------------------------------------------------------------------------------------------
@dataclass
class EvalResult:
    """One evaluation. Shapes: W weights, E episodes, L objectives, F front points.

    ``returns`` are discounted (``Σ_t γ^t r_t``) and drive every metric; ``undiscounted_returns`` are
    ``Σ_t r_t``. ``mean``/``std`` are over episodes (population std, ``ddof = 0``).
    """

    weights: np.ndarray
    """[W, L] evaluation weights."""
    returns: np.ndarray
    """[W, E, L] discounted returns."""
    undiscounted_returns: np.ndarray
    """[W, E, L] undiscounted returns."""
    lengths: np.ndarray
    """[W, E] episode lengths."""
    gamma: float
    mean: np.ndarray
    """[W, L] mean discounted return per weight."""
    std: np.ndarray
    """[W, L] population std of the discounted return per weight."""
    undiscounted_mean: np.ndarray
    undiscounted_std: np.ndarray
    front: np.ndarray
    """[F, L] Pareto front of ``mean`` (distinct points)."""
    hv: float
    eum: float
    vo: float
    cardinality: int
    equivariance_error: float | None = None
    """Mean ‖μ(L_g s) − K_g μ(s)‖₁ over visited states, when a mean function was given."""
    wall_time: float = 0.0
    """Seconds the evaluation took (rollout + metrics)."""
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def total_steps(self) -> int:
        """Env steps simulated by this evaluation."""
        return int(self.lengths.sum())

    @classmethod
    def from_returns(
        cls,
        weights: np.ndarray,
        returns: np.ndarray,
        undiscounted_returns: np.ndarray,
        lengths: np.ndarray,
        *,
        gamma: float,
        ref_point: Sequence[float],
        eum_weights: np.ndarray,
        vo_preferences: np.ndarray,
        equivariance_error: float | None = None,
        wall_time: float = 0.0,
    ) -> EvalResult:
        """Per-weight statistics and SPEC §9 metrics from per-episode returns ``[W, E, L]``."""
        mean = returns.mean(axis=1)
        std = returns.std(axis=1)  # population std (ddof = 0), as SPEC §9
        front = F.pareto_front(mean)
        return cls(
            weights=weights,
            returns=returns,
            undiscounted_returns=undiscounted_returns,
            lengths=lengths,
            gamma=gamma,
            mean=mean,
            std=std,
            undiscounted_mean=undiscounted_returns.mean(axis=1),
            undiscounted_std=undiscounted_returns.std(axis=1),
            front=front,
            hv=F.hypervolume(front, ref_point),
            eum=F.expected_utility(front, eum_weights) if len(front) else float("nan"),
            vo=F.variance_objective(mean, std, vo_preferences),
            cardinality=int(front.shape[0]),
            equivariance_error=equivariance_error,
            wall_time=wall_time,
        )

    def row(
        self, objective_names: Sequence[str], env_steps: int, final: bool | None = None
    ) -> dict[str, float | int | str]:
        """A flat record for ``eval.csv``: ``env_steps, hv, eum, vo, cardinality``, then per-objective mean
        returns over all policies (discounted, then undiscounted), the mean episode length, the
        equivariance error (empty when not measured) and, when ``final`` is given, a ``final`` column (1 on
        the end-of-run evaluation, 0 on periodic ones). No wall time: the same config and seed must give a
        byte-identical file (the time goes to TensorBoard as ``time/eval_s``)."""
        record: dict[str, float | int | str] = {
            "env_steps": int(env_steps),
            "hv": self.hv,
            "eum": self.eum,
            "vo": self.vo,
            "cardinality": self.cardinality,
        }
        for i, name in enumerate(objective_names):
            record[f"return_{name}"] = float(self.mean[:, i].mean())
        for i, name in enumerate(objective_names):
            record[f"undiscounted_return_{name}"] = float(self.undiscounted_mean[:, i].mean())
        record["mean_episode_length"] = float(self.lengths.mean())
        record["equivariance_error"] = "" if self.equivariance_error is None else self.equivariance_error
        if final is not None:
            record["final"] = int(final)
        return record


# ---- the batched rollout ------------------------------------------------------------------------------------
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

        if mean_fn is not None:
            l_sign = torch.as_tensor(spec.obs_reflection(), device=device)
            k_sign = torch.as_tensor(spec.act_reflection(), device=device)
            eq_sum = torch.zeros((), dtype=torch.float64, device=device)  # summed on device: no per-step sync
            eq_count = 0

        idx = np.arange(n_pairs)
        while idx.size:
            all_alive = idx.size == n_pairs
            obs_t = torch.as_tensor(obs[idx], device=device)
            w_t = pair_w if all_alive else pair_w[torch.as_tensor(idx, device=device)]
            actions = act_fn(obs_t, w_t).detach().to("cpu", torch.float32).numpy()
            if mean_fn is not None:
                mu = mean_fn(torch.cat([obs_t, obs_t * l_sign]), torch.cat([w_t, w_t]))
                b = idx.size
                eq_sum += (mu[b:] - mu[:b] * k_sign).abs().sum(dim=-1).sum().double()
                eq_count += b

            next_obs, reward, terminated, truncated = pool.step(idx, actions)
            undisc_ret[idx] += reward
            disc_ret[idx] += discount[idx, None] * reward
            discount[idx] *= gamma
            lengths[idx] += 1
            obs[idx] = next_obs
            # a finished env is never stepped again; the length cap guards envs without a time limit
            done = terminated | truncated | (lengths[idx] >= max_steps)
            idx = idx[~done]

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
    )


# ---- figure -------------------------------------------------------------------------------------------------
def front_figure(result: EvalResult, objective_names: Sequence[str], title: str = ""):
    """A scatter of every policy's mean discounted return, the Pareto front highlighted (one panel per
    pair of objectives). Built on a bare :class:`matplotlib.figure.Figure` (Agg canvas, no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n_obj = len(objective_names)
    pairs = [(i, j) for i in range(n_obj) for j in range(i + 1, n_obj)]
    fig = Figure(figsize=(4.0 * len(pairs), 3.6))
    FigureCanvasAgg(fig)
    for k, (i, j) in enumerate(pairs):
        ax = fig.add_subplot(1, len(pairs), k + 1)
        ax.scatter(result.mean[:, i], result.mean[:, j], s=10, c="0.7", label="policies")
        front = result.front[np.argsort(result.front[:, i])] if len(result.front) else result.front
        ax.plot(front[:, i], front[:, j], "o-", ms=4, color="C0", label=f"front ({result.cardinality})")
        ax.set_xlabel(objective_names[i])
        ax.set_ylabel(objective_names[j])
        ax.grid(alpha=0.3)
        if k == 0:
            ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


# ---- the callback -------------------------------------------------------------------------------------------
def append_csv(path: Path, record: dict[str, Any]) -> None:
    """Append ``record`` to a CSV file, writing the header if the file is new (existing header wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = list(record)
    exists = path.is_file() and path.stat().st_size > 0
    if exists:
        with path.open(newline="") as fh:
            header = next(csv.reader(fh), header)
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=header, restval="", extrasaction="ignore")
        if not exists:
            writer.writeheader()
        writer.writerow(record)


def agent_env_steps(agent) -> int:
    """The agent's env-step clock: its host-side mirror ``env_step_count`` when it has one (no device sync
    on the per-batch path), else the ``env_steps`` buffer."""
    count = getattr(agent, "env_step_count", None)
    return int(count) if count is not None else int(agent.env_steps)


def evaluate_agent(
    agent, spec: EnvSpec, cfg: EvalConfig, pool: EvalEnvPool | None = None, member: int = 0
) -> EvalResult:
    """The protocol of docs/method.md §9 with ``cfg`` on one member of an agent.

    A population agent (the agent contract, :mod:`prism.agents.contract`) is evaluated through
    ``act_member`` / ``policy_mean_member``; any other module through ``act`` (and ``policy_mean`` if it has
    one). The agent is put in eval mode for the rollout and restored afterwards. An unresolved ``cfg.seed``
    (``None``) means run seed 0; runs pass a config resolved with :meth:`EvalConfig.resolved`.
    """
    if hasattr(agent, "act_member"):
        act_fn = lambda o, w: agent.act_member(member, o, w)  # noqa: E731
        mean_fn = lambda o, w: agent.policy_mean_member(member, o, w)  # noqa: E731
    else:
        act_fn = lambda o, w: agent.act(o, w, deterministic=True)  # noqa: E731
        mean_fn = getattr(agent, "policy_mean", None)
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
            mean_fn=mean_fn if callable(mean_fn) else None,
            eum_weights=cfg.eum_weights,
            vo_preferences=cfg.vo_preferences,
            preference_seed=cfg.preference_seed,
            device=agent.device,
            pool=pool,
        )
    finally:
        agent.train(was_training)


class EvaluationCallback(Callback):
    """Evaluate the agent every ``config.every`` env steps and once more, with the final protocol, at the end
    of fit (SPEC §9).

    Reads the agent's env-step count after each training batch (``env_step_count`` if the module keeps a
    host-side mirror, else the ``env_steps`` buffer); evaluates
    ``pl_module.act(obs, weight, deterministic=True)`` and, if the module has it, the pre-tanh mean
    ``pl_module.policy_mean(obs, weight)`` for the equivariance error. Each evaluation appends a row to
    ``<run_dir>/eval.csv`` (``run_dir`` defaults to the trainer's log dir) and logs its metrics to every
    logger against env steps: periodic ones as ``eval/hv``, ``eval/eum``, ``eval/vo``, ``eval/cardinality``,
    ``eval/equivariance_error`` and ``time/eval_s``, the final one as ``eval_final/…`` and
    ``time/eval_final_s``. With ``figures`` a Pareto-front figure (``eval/front``, ``eval_final/front``) goes
    to loggers that take figures (TensorBoard).

    The final evaluation (``config.final``: ``num_weights × episodes``) always runs at the end of fit and its
    row has ``final = 1``, even when a periodic evaluation ran at the same env step; when the two protocols
    are equal that periodic result is reused instead of rolled out again (the rollout is deterministic, so
    both give the same numbers). ``last_result`` holds the latest :class:`EvalResult`, ``final_result`` the
    final one, ``history`` every CSV row.

    ``run_seed`` resolves ``config.seed = None`` (see :meth:`EvalConfig.reset_seed`). The env copies are built
    at the first evaluation and kept until fit ends.

    Populations: one callback per member (``member``), each with the member's seed as ``run_seed``, its own
    ``run_dir`` and ``logger`` (None: every trainer logger), sharing one env ``pool`` (closed by whoever
    created it). The callback asks the agent to end a batch exactly at each due step (``pause_at``).
    """

    def __init__(
        self,
        spec: EnvSpec,
        config: EvalConfig | None = None,
        run_dir: str | Path | None = None,
        env_fn: Callable[[], gym.Env] | None = None,
        *,
        run_seed: int = 0,
        figures: bool = True,
        member: int = 0,
        logger: Any | None = None,
        pool: EvalEnvPool | None = None,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.member = member
        self.logger = logger
        self.config = (config or EvalConfig()).resolved(run_seed)
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.env_fn = env_fn
        self.figures = figures
        self.last_result: EvalResult | None = None
        self.final_result: EvalResult | None = None
        self.history: list[dict[str, Any]] = []
        self._next_eval = self.config.every
        self._last_eval_step = -1
        self._final_done = False
        self._pool: EvalEnvPool | None = pool
        self._owns_pool = pool is None

    @property
    def state_key(self) -> str:
        # one callback per population member: Lightning needs each stateful callback's key to be unique
        return self._generate_state_key(member=self.member)

    # -- state (so a resumed run neither repeats nor skips an evaluation) --
    def state_dict(self) -> dict[str, Any]:
        return {
            "next_eval": self._next_eval,
            "last_eval_step": self._last_eval_step,
            "final_done": self._final_done,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._next_eval = int(state_dict["next_eval"])
        self._last_eval_step = int(state_dict["last_eval_step"])
        self._final_done = bool(state_dict.get("final_done", False))

    @property
    def csv_path(self) -> Path | None:
        return None if self.run_dir is None else self.run_dir / "eval.csv"

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.run_dir is None:
            self.run_dir = Path(trainer.log_dir or trainer.default_root_dir)

    env_steps = staticmethod(agent_env_steps)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # After every on_fit_start (a resume restores _next_eval there): the agent ends a batch at that step.
        self._schedule(pl_module)

    def _schedule(self, pl_module: LightningModule) -> None:
        pause_at = getattr(pl_module, "pause_at", None)
        if pause_at is not None:
            pause_at(self._next_eval)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        if self.env_steps(pl_module) >= self._next_eval:
            self.evaluate(trainer, pl_module)
            self._schedule(pl_module)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.evaluate_final(trainer, pl_module)

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._pool is not None:
            self._pool.close()  # idempotent: a shared pool is closed by every member's callback alike
            if self._owns_pool:
                self._pool = None

    def _rollout(self, pl_module: LightningModule, cfg: EvalConfig) -> EvalResult:
        if self._pool is None:
            self._pool = EvalEnvPool(self.spec, env_fn=self.env_fn, num_workers=cfg.num_workers)
        return evaluate_agent(pl_module, self.spec, cfg, pool=self._pool, member=self.member)

    def evaluate(self, trainer: Trainer, pl_module: LightningModule) -> EvalResult:
        """Run one periodic evaluation now, record it and return it."""
        cfg = self.config
        env_steps = self.env_steps(pl_module)
        result = self._rollout(pl_module, cfg)
        self.last_result = result
        self._last_eval_step = env_steps
        self._next_eval = (env_steps // cfg.every + 1) * cfg.every
        self._record(trainer, result, env_steps, final=False)
        return result

    def evaluate_final(self, trainer: Trainer, pl_module: LightningModule) -> EvalResult:
        """The end-of-run evaluation with ``config.final``; recorded once per run (a resumed run whose final
        row is already written recomputes the result, for ``front.csv``, without recording it again)."""
        cfg = self.config
        env_steps = self.env_steps(pl_module)
        reusable = (
            cfg.final_equals_periodic() and self.last_result is not None and self._last_eval_step == env_steps
        )
        result = self.last_result if reusable else self._rollout(pl_module, cfg.final_protocol())
        assert result is not None
        self.final_result = self.last_result = result
        if not self._final_done:
            self._last_eval_step = env_steps
            self._final_done = True
            self._record(trainer, result, env_steps, final=True)
        return result

    def _record(self, trainer: Trainer, result: EvalResult, env_steps: int, *, final: bool) -> None:
        record = result.row(self.spec.objective_names, env_steps, final=final)
        self.history.append(record)
        if trainer.is_global_zero:
            if self.csv_path is not None:
                append_csv(self.csv_path, record)
            self._log(trainer, result, env_steps, prefix="eval_final" if final else "eval")

    def _log(self, trainer: Trainer, result: EvalResult, env_steps: int, prefix: str = "eval") -> None:
        metrics = {
            f"{prefix}/hv": result.hv,
            f"{prefix}/eum": result.eum,
            f"{prefix}/vo": result.vo,
            f"{prefix}/cardinality": float(result.cardinality),
            "time/eval_s" if prefix == "eval" else f"time/{prefix}_s": result.wall_time,
        }
        if result.equivariance_error is not None:
            metrics[f"{prefix}/equivariance_error"] = result.equivariance_error
        metrics = {k: v for k, v in metrics.items() if not math.isnan(v)}
        for logger in [self.logger] if self.logger is not None else trainer.loggers:
            logger.log_metrics(metrics, step=env_steps)
            experiment = getattr(logger, "experiment", None)
            if self.figures and hasattr(experiment, "add_figure"):
                fig = front_figure(result, self.spec.objective_names, title=f"{env_steps} env steps")
                experiment.add_figure(f"{prefix}/front", fig, global_step=env_steps, close=True)
