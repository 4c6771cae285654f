"""Reward shapers: what sits between the (sparse) env and the replay buffer.

A shaper receives each env step with the *emitted* reward vector and returns the transitions that are ready
to be stored, with the sparse channel replaced by the redistribution it implements (docs/method.md §5):

- ``none``: the sparse channel exactly as emitted (the baseline; also the oracle on a dense env).
- ``resymnet``, ``rrd`` and every learned model: the model's per-step prediction from ``h_t``
  (:class:`PredictedRewardShaper`; ``h_t`` as the model builds it, with ``s_{t+1}`` for a model that reads it,
  RRD's ``r̂(s, a, s')``).
- ``uniform`` / ``random``: need the released sum and the segment length, so the transitions of a segment are
  held until the segment is released (:class:`UniformShaper`, :class:`RandomShaper`).

:func:`make_shaper` builds one by name (the reward methods are registered by :mod:`prism.plugins` with the
factories below); :func:`relabel_rewards` re-predicts the sparse channel of a replay batch
and :func:`make_relabel_fn` wraps it as the agent's ``relabel_fn`` hook.
The shaped values are checked on the host (a NaN/inf raises :class:`~prism.core.errors.NonFiniteError` naming
``reward/shaped``; the agent fills in the env step).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np
import torch

from prism.core.errors import NonFiniteError
from prism.reward.conservation import conserve_one_segment

if TYPE_CHECKING:
    from prism.data.replay import ReplayBatch
    from prism.reward.model import RewardModel


class Transition(NamedTuple):
    """One env step as stored in the replay buffer (numpy, unbatched)."""

    obs: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_obs: np.ndarray
    # Termination only: a truncated step still bootstraps from next_obs (docs/method.md §6).
    terminated: bool
    weight: np.ndarray


class RewardShaper(Protocol):
    """Turns env steps into buffer-ready transitions; see the module docstring."""

    def push(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray,
        terminated: bool,
        truncated: bool,
        weight: np.ndarray,
        released: bool,
    ) -> list[Transition]: ...

    def reset(self) -> None: ...

    def state_dict(self) -> dict:
        """What the shaper holds between env steps (pending transitions, its generator), as tensors and plain
        containers: whole-run checkpoints save it, so ``--resume`` continues bit for bit (``{}`` if nothing)."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Put back what :meth:`state_dict` returned."""
        ...


class _Stateless:
    """A shaper that holds nothing between env steps (its reward model is checkpointed by the loop)."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class PassThroughShaper(_Stateless):
    """``none``: store the emitted reward unchanged."""

    def push(
        self, obs, action, reward, next_obs, terminated, truncated, weight, released
    ) -> list[Transition]:
        return [
            Transition(obs, action, np.asarray(reward, dtype=np.float32), next_obs, bool(terminated), weight)
        ]

    def reset(self) -> None:
        pass


# ---- redistributions added by the reward package (docs/method.md §5) ----------------------------------------------


def _pending_state(pending: list[Transition]) -> dict:
    """Pending (unreleased) transitions as stacked tensors, for whole-run checkpoints."""
    if not pending:
        return {"pending": None}
    fields = {
        name: np.stack([np.asarray(value, dtype=np.float32) for value in values])
        for name, values in zip(Transition._fields, zip(*pending))
    }
    return {"pending": {name: torch.from_numpy(values) for name, values in fields.items()}}


def _pending_from_state(state: dict) -> list[Transition]:
    """The transitions :func:`_pending_state` saved (none for a state without them)."""
    pending = state.get("pending")
    if pending is None:
        return []
    arrays = {name: tensor.numpy() for name, tensor in pending.items()}
    return [
        Transition(
            arrays["obs"][i].copy(),
            arrays["action"][i].copy(),
            arrays["reward"][i].copy(),
            arrays["next_obs"][i].copy(),
            bool(arrays["terminated"][i]),
            arrays["weight"][i].copy(),
        )
        for i in range(arrays["obs"].shape[0])
    ]


class PredictedRewardShaper:
    """A learned reward model's method (``resymnet``, ``rrd``, a plug-in's): replace the sparse channel by the
    model's per-step prediction at once.

    ``model`` is a :class:`~prism.reward.model.RewardModel`: the shaper hands it the step's features as the
    model builds them (its ``inputs``; one that reads ``s_{t+1}`` gets the ``next_obs`` that :meth:`push`
    receives, which on an episode's last step is the final observation, before the env resets; one that reads
    the termination flag gets :meth:`push`'s ``terminated``, the env's own, never its ``truncated``); assign a
    new one after a refit (``shaper.model = ...``). Transitions pushed before the swap keep the reward they
    were given (the paper's faithful mode; see ``relabel``).

    A model with ``conserves_return`` (ReSymNet's ``reward.conserve_return``, docs/method.md §4c) gets each
    step predicted at once too, but the transitions are held until the segment is released and then stored
    with ``f(h_t) + (R − Σ_s f(h_s)) / T``, so the segment's shaped values sum to its released ``R``. A reset
    mid-segment drops the held steps (they have no target), as the uniform shaper does.
    """

    def __init__(self, model: RewardModel | None, sparse_channel: int):
        self.sparse_channel = int(sparse_channel)
        self._buf: torch.Tensor | None = None
        self._pending: list[Transition] = []
        self.model = model

    @property
    def model(self) -> RewardModel | None:
        return self._model

    @model.setter
    def model(self, model: RewardModel | None) -> None:
        self._model = model
        self._buf = None  # input width or device may change with the model

    def _features(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray | None,
        terminated: bool | None = None,
    ) -> torch.Tensor:
        """``h_t`` in a pre-allocated ``[1, F]`` tensor on the model's device (no per-step tensor allocation)."""
        model = self._model
        if model is None:
            raise ValueError("reward.name: the shaper has no fitted reward model yet")
        inputs = model.inputs
        width = inputs.width(obs.shape[-1], action.shape[-1], reward.shape[-1])
        if self._buf is None or self._buf.shape[1] != width:
            self._buf = torch.zeros(1, width, device=model.device)
        buf = self._buf
        if buf.device.type == "cpu":
            row = buf.numpy()[0]  # shares memory with the tensor
            inputs.write(row, obs, action, reward, self.sparse_channel, next_obs, terminated)
        else:
            flag = {"terminated": terminated} if inputs.terminal else {}
            built = model.features(obs, action, reward, self.sparse_channel, next_obs, **flag)
            buf.copy_(built[None])
        return buf

    def predict_step(
        self,
        obs: np.ndarray,
        action: np.ndarray,
        reward: np.ndarray,
        next_obs: np.ndarray | None = None,
        terminated: bool | None = None,
    ) -> float:
        """The model's per-step prediction ``f(h_t)`` for one step (``next_obs``, ``terminated``: needed by a
        model that reads them)."""
        features = self._features(obs, action, reward, next_obs, terminated)
        assert self._model is not None  # (checked by _features)
        with torch.no_grad():
            return float(self._model.predict(features)[0])

    def push(
        self, obs, action, reward, next_obs, terminated, truncated, weight, released
    ) -> list[Transition]:
        shaped = np.array(reward, dtype=np.float32)  # a copy: the env's array is not ours to modify
        # The emitted dense channels equal the true dense rewards, so h_t can be built from the emitted vector.
        value = self.predict_step(obs, action, shaped, next_obs, bool(terminated))
        if not math.isfinite(value):
            raise NonFiniteError("reward/shaped", value)
        # On a release step the emitted sparse value is the segment's released sum R (read before it is replaced).
        released_sum = float(shaped[self.sparse_channel])
        shaped[self.sparse_channel] = value
        transition = Transition(obs, action, shaped, next_obs, bool(terminated), weight)
        if not getattr(self._model, "conserves_return", False):
            return [transition]
        self._pending.append(transition)
        if not released:
            return []
        out, self._pending = self._pending, []
        # f(h_t) of each held step is what it was predicted with when pushed (a refit in between changes none).
        values = conserve_one_segment([tr.reward[self.sparse_channel] for tr in out], released_sum)
        if not np.isfinite(values).all():
            raise NonFiniteError("reward/shaped", float(values[~np.isfinite(values)][0]))
        for tr, conserved in zip(out, values):
            tr.reward[self.sparse_channel] = conserved
        return out

    def reset(self) -> None:
        self._pending = []

    def state_dict(self) -> dict:
        """The held transitions of a return-conserving model's open segment (``{}`` when none are held)."""
        return _pending_state(self._pending) if self._pending else {}

    def load_state_dict(self, state: dict) -> None:
        self._pending = _pending_from_state(state)


class _SegmentHoldingShaper:
    """Holds a segment's transitions until the sparse channel is released, then fills the channel in."""

    def __init__(self, sparse_channel: int):
        self.sparse_channel = int(sparse_channel)
        self._pending: list[Transition] = []

    def _weights(self, length: int) -> np.ndarray:
        """Per-step fractions of the released sum (they sum to 1)."""
        raise NotImplementedError

    def push(
        self, obs, action, reward, next_obs, terminated, truncated, weight, released
    ) -> list[Transition]:
        rew = np.array(reward, dtype=np.float32)
        self._pending.append(Transition(obs, action, rew, next_obs, bool(terminated), weight))
        if not released:
            return []
        # The emitted value on the release step is the segment's released sum R; the earlier steps emitted 0.
        total = float(rew[self.sparse_channel])
        out, self._pending = self._pending, []
        values = total * self._weights(len(out))
        if not np.isfinite(values).all():
            raise NonFiniteError("reward/shaped", float(values[~np.isfinite(values)][0]))
        for tr, value in zip(out, values):
            tr.reward[self.sparse_channel] = value
        return out

    def reset(self) -> None:
        # A reset mid-segment drops the unreleased steps: they have no target (the wrapper resets its sum too).
        self._pending = []

    def state_dict(self) -> dict:
        """The pending (unreleased) transitions as stacked tensors, for whole-run checkpoints."""
        return _pending_state(self._pending)

    def load_state_dict(self, state: dict) -> None:
        self._pending = _pending_from_state(state)


class UniformShaper(_SegmentHoldingShaper):
    """``uniform``: every step of a released segment gets ``R / T``."""

    def _weights(self, length: int) -> np.ndarray:
        return np.full(length, 1.0 / length)


class RandomShaper(_SegmentHoldingShaper):
    """``random``: ``α_t ~ U(−1, 1)`` per step, ``r_t = R · α_t / Σ_s α_s`` (seeded generator).

    Faithful to the ablation: Σα can be small, so individual rewards can be large, but they always sum to R.
    """

    def __init__(self, sparse_channel: int, seed: int | None = None):
        super().__init__(sparse_channel)
        self._rng = np.random.default_rng(seed)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._rng.bit_generator.state = state["rng"]

    def _weights(self, length: int) -> np.ndarray:
        while True:
            alpha = self._rng.uniform(-1.0, 1.0, size=length)
            total = alpha.sum()
            # Σα = 0 has probability zero but would divide by zero; redraw in that case.
            if abs(total) > 1e-12:
                return alpha / total


# ---- factories registered in prism.plugins (the registry's keywords: sparse_channel, model, seed) --------


def pass_through_shaper(*, sparse_channel: int | None = None, model=None, seed: int | None = None):
    """``none``: the emitted reward as it is (the baseline; the oracle on a dense env)."""
    return PassThroughShaper()


def predicted_shaper(*, sparse_channel: int | None = None, model=None, seed: int | None = None):
    """A learned reward model's method (``resymnet``): the model's per-step prediction (``model`` may be
    ``None`` at build time; the loop installs each fitted model)."""
    return PredictedRewardShaper(model, _channel("a learned reward model", sparse_channel))


def uniform_shaper(*, sparse_channel: int | None = None, model=None, seed: int | None = None):
    """``uniform``: R / T on every step of a released segment."""
    return UniformShaper(_channel("uniform", sparse_channel))


def random_shaper(*, sparse_channel: int | None = None, model=None, seed: int | None = None):
    """``random``: R · α_t / Σα with α_t ~ U(−1, 1) from a generator seeded with ``seed``."""
    return RandomShaper(_channel("random", sparse_channel), seed=seed)


def _channel(method: str, sparse_channel: int | None) -> int:
    if sparse_channel is None:
        raise ValueError(f"reward.name: {method} needs the sparse channel (env.dense must be false)")
    return int(sparse_channel)


def make_shaper(
    name: str,
    *,
    sparse_channel: int | None = None,
    model=None,
    seed: int | None = None,
) -> RewardShaper:
    """A ready-to-use shaper for the registered reward method (or class path) ``name``.

    Unlike the run (which builds shapers before the first fit and installs models later), a method that
    needs a learned model must be given a fitted ``model`` here.
    """
    from prism.plugins.registry import REWARDS

    entry = REWARDS.entry("reward.name", name)
    if entry.needs_model and model is None:
        raise ValueError(f"reward.name: {name!r} needs a fitted reward model ({entry.model})")
    return entry.shaper_factory()(sparse_channel=sparse_channel, model=model, seed=seed)


def relabel_rewards(
    model: RewardModel,
    obs: torch.Tensor,
    action: torch.Tensor,
    reward: torch.Tensor,
    sparse_channel: int,
    next_obs: torch.Tensor | None = None,
    done: torch.Tensor | None = None,
) -> torch.Tensor:
    """Replay-batch relabelling (``reward.relabel: true``): rewards ``[B, L]`` with the sparse channel replaced
    by ``model.predict(h_t)``; the dense channels (true values, stored as emitted) are kept and feed ``h_t``.
    ``next_obs`` (the batch's ``s_{t+1}``) and ``done`` (its stored termination flags, which never mark a
    truncation) are read only by a model that uses them, and then they are required.
    """
    if model.inputs.next_obs and next_obs is None:
        raise ValueError("reward.relabel: the reward model reads the next observation; none was given")
    if model.inputs.terminal and done is None:
        raise ValueError("reward.relabel: the reward model reads the termination flag; none was given")
    # (on the model's device: the replay batch may live on another)
    flag = {"terminated": done} if model.inputs.terminal else {}
    feats = model.features(obs, action, reward, sparse_channel, next_obs, **flag)
    with torch.no_grad():
        pred = model.predict(feats).to(device=reward.device, dtype=reward.dtype)
    out = reward.clone()
    out[:, sparse_channel] = pred
    return out


def make_relabel_fn(
    models: RewardModel | Sequence[RewardModel], sparse_channel: int
) -> Callable[[ReplayBatch], ReplayBatch]:
    """The agent's ``relabel_fn`` for ``reward.relabel: true``: a replay batch with its rewards passed through
    :func:`relabel_rewards` (the sparse channel re-predicted, every other field unchanged).

    ``models`` is one reward model, or one per population member; a batch is ``[B, ...]`` (one member) or
    ``[S, B, ...]``, member s relabelled by ``models[s]``."""
    models = list(models) if isinstance(models, (list, tuple)) else [models]

    def relabel(batch: ReplayBatch) -> ReplayBatch:
        if batch.obs.dim() == 2:
            reward = relabel_rewards(
                models[0], batch.obs, batch.action, batch.reward, sparse_channel, batch.next_obs, batch.done
            )
        else:
            reward = torch.stack(
                [
                    relabel_rewards(
                        model,
                        batch.obs[m],
                        batch.action[m],
                        batch.reward[m],
                        sparse_channel,
                        batch.next_obs[m],
                        batch.done[m],
                    )
                    for m, model in enumerate(models)
                ]
            )
        return batch._replace(reward=reward)

    return relabel
