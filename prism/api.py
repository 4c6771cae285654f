"""The Python API: load a trained run and use its policy (and reward model) from your own code.

```python
import prism

run = prism.load_run("runs/quickstart")
run.config.loop.cycles                       # the resolved RunConfig the run trained with
action = run.act(obs, [0.5, 0.3, 0.2])       # deterministic tanh(mu(s, w)); deterministic=False samples
result = run.evaluate(num_weights=10, episodes=2)   # the numbers `prism evaluate` prints
result.hv, result.eum, result.vo, result.front
run.shaped_reward(transitions)               # the reward model's per-step prediction (runs with a model)
```

:func:`load_run` rebuilds the run from its folder's ``config.yaml`` and loads its last good checkpoint (the
same files ``prism evaluate`` reads; nothing is written). A population folder loads every member; ``member=``
(required there) picks whose policy, evaluation and reward model the methods use by default, and a member's
own ``seed<N>/`` folder loads that member.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from prism.config import ConfigError, RunConfig, run_label
from prism.envs import EnvSpec
from prism.evaluation.config import EvalConfig
from prism.evaluation.result import EvalResult

if TYPE_CHECKING:
    from prism.reward.model import RewardModel

__all__ = ["LoadedRun", "PopulationFolder", "load_run"]

_PROTOCOLS = ("final", "periodic")


class LoadedRun:
    """A trained run, loaded from its folder by :func:`load_run`.

    Attributes:
        config: the run's resolved :class:`~prism.config.RunConfig` (its ``config.yaml``).
        spec: the env's :class:`~prism.envs.EnvSpec` (objective names, dimensions, reference point).
        run_dir: the run folder that was loaded.
        env_steps: the env steps of the loaded checkpoint.
        seeds: the members' seeds (one for a single run).
        member: the default member of :meth:`act`, :meth:`evaluate` and :meth:`shaped_reward`.
    """

    def __init__(self, run: Any, env_steps: int, reward_models: list[RewardModel | None], member: int = 0):
        self._run = run
        self.config: RunConfig = run.config
        self.spec: EnvSpec = run.spec
        self.run_dir = Path(run.run_dir)
        self.env_steps = int(env_steps)
        self.seeds: list[int] = [m.seed for m in run.members]
        self.member = int(member)
        self._reward_models = reward_models

    def __repr__(self) -> str:
        return (
            f"LoadedRun({str(self.run_dir)!r}, method={run_label(self.config)!r}, env={self.spec.id!r}, "
            f"seeds={self.seeds}, env_steps={self.env_steps})"
        )

    @property
    def agent(self) -> torch.nn.Module:
        """The agent (a LightningModule) with the checkpoint's weights, in eval mode."""
        return self._run.agent

    def _member(self, member: int | None) -> int:
        index = self.member if member is None else int(member)
        if not 0 <= index < len(self.seeds):
            raise ValueError(f"member: {index} is out of range for a run of {len(self.seeds)} member(s)")
        return index

    # ---- acting ---------------------------------------------------------------------------------------
    def act(
        self,
        obs: np.ndarray | Sequence[float],
        weights: np.ndarray | Sequence[float],
        *,
        deterministic: bool = True,
        member: int | None = None,
    ) -> np.ndarray:
        """The policy's action(s) in ``[-1, 1]`` for observation(s) ``obs`` (``[obs_dim]`` or ``[B, obs_dim]``)
        under preference ``weights`` (``[L]``, broadcast over a batch, or ``[B, L]``).

        ``deterministic`` (default) gives ``tanh(mu(s, w))``, the action evaluations use; ``False`` samples
        the policy (torch's global RNG). The result has ``obs``'s leading shape: ``[act_dim]`` or
        ``[B, act_dim]`` (float32 numpy)."""
        index = self._member(member)
        agent = self._run.agent
        obs_t = torch.as_tensor(np.asarray(obs, dtype=np.float32), device=agent.device)
        single = obs_t.dim() == 1
        obs_t = obs_t.reshape(-1, self.spec.obs_dim)
        w = torch.as_tensor(np.asarray(weights, dtype=np.float32), device=agent.device)
        if w.shape[-1] != self.spec.n_objectives:
            raise ValueError(
                f"weights: expected {self.spec.n_objectives} entries, got shape {tuple(w.shape)}"
            )
        w = w.reshape(-1, self.spec.n_objectives).expand(obs_t.shape[0], -1)
        with torch.no_grad():
            if deterministic:
                action = agent.act_member(index, obs_t, w)
            elif len(self.seeds) == 1:
                action = agent.act(obs_t, w, deterministic=False)
            else:  # the agent samples every member at once: give each the same batch, keep this member's
                size = len(self.seeds)
                action = agent.act(obs_t.expand(size, -1, -1), w.expand(size, -1, -1), deterministic=False)
                action = action[index]
        out = action.detach().cpu().numpy().astype(np.float32)
        return out[0] if single else out

    # ---- evaluating -----------------------------------------------------------------------------------
    def eval_config(
        self,
        num_weights: int | None = None,
        episodes: int | None = None,
        *,
        protocol: str = "final",
        member: int | None = None,
    ) -> EvalConfig:
        """The evaluation config :meth:`evaluate` uses: the member's (reset seed resolved from its seed, as in
        training), with ``protocol``'s counts (``final``: ``eval.final.*``; ``periodic``: ``eval.*``) and
        ``num_weights`` / ``episodes`` in place of them when given."""
        if protocol not in _PROTOCOLS:
            raise ValueError(f"protocol: expected one of {', '.join(_PROTOCOLS)}, got {protocol!r}")
        cfg = self._run.members[self._member(member)].evaluation.config
        cfg = cfg.final_protocol() if protocol == "final" else cfg
        changes = {k: v for k, v in (("num_weights", num_weights), ("episodes", episodes)) if v is not None}
        return dataclasses.replace(cfg, **changes) if changes else cfg

    def evaluate(
        self,
        num_weights: int | None = None,
        episodes: int | None = None,
        *,
        protocol: str = "final",
        member: int | None = None,
    ) -> EvalResult:
        """Evaluate the policy on the plain dense env, as ``prism evaluate`` does (same episodes, same numbers):
        by default with the run's final protocol (``eval.final``; ``protocol="periodic"`` for the learning
        curve's), ``num_weights`` x ``episodes`` overriding its counts. Returns an
        :class:`~prism.evaluation.result.EvalResult` (``hv``, ``eum``, ``vo``, ``front``, per-weight ``mean``
        and ``std`` of the discounted returns, ...). Nothing is written."""
        from prism.evaluation.rollout import evaluate_agent

        index = self._member(member)
        cfg = self.eval_config(num_weights, episodes, protocol=protocol, member=index)
        return evaluate_agent(self._run.agent, self.spec, cfg, member=index)

    # ---- the reward model -----------------------------------------------------------------------------
    @property
    def reward_model(self) -> RewardModel | None:
        """The member's reward model as last fitted (None for a method without one, or before its first fit)."""
        return self._reward_models[self.member] if self._reward_models else None

    @property
    def sparse_channel(self) -> int | None:
        """The channel the run hid and its reward model predicts (None for the dense oracle)."""
        from prism.config import sparse_channel

        return sparse_channel(self.config, self.spec)

    def shaped_reward(self, transitions: Any, *, member: int | None = None) -> np.ndarray:
        """The reward model's per-step prediction of the sparse channel for ``transitions``.

        ``transitions`` is anything with ``obs``, ``action`` and ``reward`` fields (a
        :class:`~prism.reward.shapers.Transition`, a sequence of them, or a mapping / named tuple of arrays
        with a leading batch dimension); ``obs`` is the observation before the step, ``reward`` the step's
        reward vector (only its dense channels are read, so the true and the emitted vector give the same
        values). A model that reads the next observation (``rrd``) also needs ``next_obs``, the observation
        the step led to, and one that reads the termination flag (``reward.terminal_feature``) ``terminated``
        (a :class:`~prism.reward.shapers.Transition` has both). This is the model's per-step prediction
        ``f(h_t)``; with ``reward.conserve_return`` a run's shaper also shifts a released segment's steps by
        ``(R − Σ f) / T`` (:func:`prism.reward.conservation.conserve_segment_returns`). Returns float32 numpy with the
        transitions' leading shape (a scalar for one transition). A run without a reward model (oracle,
        baseline, uniform, random) raises ``ValueError``."""
        model = self._reward_models[self._member(member)] if self._reward_models else None
        channel = self.sparse_channel
        if model is None or channel is None:
            raise ValueError(
                f"shaped_reward: run {self.run_dir} has no reward model (reward.name={self.config.reward.name})"
            )
        reads_next, reads_flag = model.inputs.next_obs, model.inputs.terminal
        extra = (("next_obs",) if reads_next else ()) + (("terminated",) if reads_flag else ())
        obs, action, reward, *rest = _fields(transitions, extra)
        next_obs = rest.pop(0) if reads_next else None
        terminated = rest.pop(0).astype(bool) if reads_flag else None
        flag = {"terminated": terminated} if reads_flag else {}
        features = model.features(obs, action, reward, channel, next_obs, **flag)
        lead = features.shape[:-1]
        with torch.no_grad():
            values = model.predict(features.reshape(-1, features.shape[-1]))
        return values.reshape(lead).detach().cpu().numpy().astype(np.float32)


def _as_record(item: Any) -> Mapping[str, Any] | None:
    """A transition's fields by name: a mapping as it is, a named tuple (a
    :class:`~prism.reward.shapers.Transition`) or an object by its attributes; None for anything else (a
    sequence of transitions)."""
    if isinstance(item, Mapping):
        return item
    try:
        return item._asdict()  # a named tuple
    except AttributeError:
        try:
            return vars(item)
        except TypeError:
            return None


def _fields(transitions: Any, extra: tuple[str, ...] = ()) -> tuple[np.ndarray, ...]:
    """``(obs, action, reward, *extra)`` arrays of one transition, a sequence of them, or a batch of arrays."""
    keys = ("obs", "action", "reward", *extra)
    wanted = ", ".join(keys[:-1]) + f" and {keys[-1]}"
    record = _as_record(transitions)
    if record is not None and "obs" in record:
        records, stack = [record], False
    else:
        records = [_as_record(t) for t in transitions] if record is None else []
        if not records or records[0] is None or "obs" not in records[0]:
            raise ValueError(f"transitions: expected Transition(s) or a mapping with {wanted} arrays")
        stack = True
    for k in extra:
        if k not in records[0]:
            raise ValueError(f"transitions: this run's reward model reads {k}; give {wanted} arrays")
    if not stack:
        return tuple(np.asarray(records[0][k], dtype=np.float32) for k in keys)
    return tuple(np.stack([np.asarray(r[k], dtype=np.float32) for r in records]) for k in keys)


class PopulationFolder(ConfigError):
    """:func:`load_run` of a population folder without ``member``: the line lists the members; ``run_dir``
    and ``seeds`` let a caller with no ``member`` argument (``prism render``) say it its own way."""

    def __init__(self, message: str, run_dir: Path, seeds: Sequence[int]) -> None:
        super().__init__(message)
        self.run_dir, self.seeds = run_dir, tuple(seeds)


def _check_member(member: int | None, seeds: Sequence[int], run_dir: Path) -> None:
    """A population's member must be named, and be one of its members (a one-line ConfigError otherwise)."""
    members = ", ".join(
        f"member={i} (seed {seed}, {run_dir / f'seed{seed}'})" for i, seed in enumerate(seeds)
    )
    if member is None:
        raise PopulationFolder(
            f"run_dir: {run_dir} is a population of {len(seeds)} members; choose one with load_run(..., "
            f"member=N) or load its folder: {members}",
            run_dir,
            seeds,
        )
    if not 0 <= member < len(seeds):
        raise ConfigError(f"member: {member} is not a member of {run_dir}; its members: {members}")


def load_run(run_dir: str | Path, *, member: int | None = None) -> LoadedRun:
    """Load a trained run (its ``config.yaml`` and last good checkpoint) for acting, evaluating and its reward
    model; see :class:`LoadedRun`. ``run_dir`` is a run folder, a population folder (then ``member``, the
    index of a seed in its ``seeds``, says which member the methods use by default; each method's
    ``member=`` can name another) or one member's ``seed<N>/`` folder (then ``member`` is that member).
    Raises :class:`~prism.config.ConfigError` naming the folder when it is not a run, has no usable
    checkpoint, or is a population loaded without ``member`` (the line lists its members). Nothing is
    written."""
    from prism.core._warnings import silence_library_noise
    from prism.plugins.registry import REWARD_MODELS
    from prism.run.checkpoint_files import checkpoint_path, load_checkpoint
    from prism.run.fit import build_run
    from prism.run.layout import trained_run_folder

    silence_library_noise()
    config, population_member, run_dir = trained_run_folder(Path(run_dir), key="run_dir")
    if population_member is not None:
        member = population_member
    elif config.seeds is not None:
        _check_member(member, config.seeds, run_dir)
    member = 0 if member is None else member
    config.run_dir = str(run_dir)  # the folder may have moved since training: read what is here
    run = build_run(config, progress_bar=False)
    loaded = load_checkpoint(
        run.run_dir, key="run_dir", check=lambda state: run.agent.load_state_dict(state["agent"])
    )
    if loaded is None:
        raise ConfigError(f"run_dir: no checkpoint at {checkpoint_path(run.run_dir)}")
    run.agent.eval()
    saved = loaded.state["loop"]["models"]
    models: list[RewardModel | None] = []
    if any(m is not None for m in saved):
        load = REWARD_MODELS.entry("reward.name", run.loop.settings.reward_model).load_fn()
        models = [load(m) if m is not None else None for m in saved]
    return LoadedRun(run, int(loaded.state["env_steps"]), models, member=member)
