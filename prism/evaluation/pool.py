"""Env copies for batched evaluation, stepped in this process and in worker processes (:class:`EvalEnvPool`).

For MuJoCo envs, whose physics dominates a step, a chunk of the copies stays in this process and the others
go to worker processes (see the class for the measurements that chose processes over threads). Kept over
gymnasium's ``AsyncVectorEnv``, which runs one process per env copy and steps every copy at every call:
see docs/benchmarks.md ("Evaluation env pool"): 2.2–5.1× slower on the same evaluation.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import gymnasium as gym
import numpy as np

from prism.envs.spec import EnvSpec

__all__ = ["EvalEnvPool"]


def _is_mujoco(env: gym.Env) -> bool:
    try:
        from gymnasium.envs.mujoco.mujoco_env import MujocoEnv
    except Exception:  # pragma: no cover - mujoco extra missing
        return False
    return isinstance(env.unwrapped, MujocoEnv)


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _workers(requested: int, n: int, mujoco: bool) -> int:
    """Worker processes for ``n`` env copies: ``requested``, or with −1 an automatic count (a worker pays only
    with enough envs to amortise its per-step round trip and the scheduler's wake-up latency)."""
    if requested < 0:
        requested = min(3, _usable_cpus() - 1, n // 64) if mujoco else 0
    return max(0, min(requested, n - 1))


def planned_workers(spec: EnvSpec, requested: int, n: int) -> int:
    """The worker processes an :class:`EvalEnvPool` with ``num_workers=requested`` runs for ``n`` episodes at
    once on this machine (what a run records as its resolved ``eval.num_workers``)."""
    if requested >= 0:
        return _workers(requested, n, mujoco=False)
    env = spec.make()
    try:
        return _workers(requested, n, _is_mujoco(env))
    finally:
        env.close()


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
    """A worker process: owns ``n_envs`` env copies and serves reset / step / close requests.

    Ctrl-C reaches every process of the terminal's group: a worker ignores it and lets the main process, which
    owns the pool, stop the run and close the workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
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
        workers = _workers(self.requested_workers, n, _is_mujoco(first))
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
