"""The reward-model contract: what the loop, shapers, diagnostics and checkpoints use of a fitted model.

:class:`RewardModel` is the protocol (the annotated type wherever a fitted model is held); :class:`RewardModelBase`
implements its plumbing for an ``nn.Module``: a model declares the column groups it reads (``inputs``, a
:class:`~prism.data.features.FeatureLayout`) and brings ``predict`` and ``to_dict``; the base builds its
features (one place, for one env step, a replay batch or a stored segment) on its own device.
"""

from __future__ import annotations

import itertools
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor, nn

from prism.data.features import FeatureLayout

Array = Tensor | np.ndarray


class RewardModel(Protocol):
    """A fitted reward model."""

    inputs: FeatureLayout
    """The column groups of a step it reads (dense rewards, the next observation)."""

    @property
    def device(self) -> torch.device:
        """Where it computes (its features are built there)."""
        ...

    def features(
        self,
        obs: Array,
        action: Array,
        reward: Array,
        sparse_channel: int,
        next_obs: Array | None = None,
        terminated: Array | bool | None = None,
    ) -> Tensor:
        """Its inputs ``[..., F]`` for steps ``(s_t, a_t, r_t[, s_{t+1}][, d_t])`` on its device; ``next_obs``
        and ``terminated`` (the env's termination flag of each step, never truncation) are read only by a
        model whose ``inputs`` have them, and then required."""
        ...

    def predict(self, features: Tensor) -> Tensor:
        """``[N]`` per-step reward of raw features ``[N, F]``."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """Its state as plain values and tensors (the registered ``load`` rebuilds it)."""
        ...


class RewardModelBase(nn.Module):
    """:class:`RewardModel`'s plumbing for an ``nn.Module`` (subclass it and set ``inputs``; bring ``predict``
    and ``to_dict``). Calling the model predicts: ``model(features)`` is ``model.predict(features)``."""

    inputs: FeatureLayout = FeatureLayout()
    conserves_return: bool = False
    """Whether its shaper adds ``(R − Σ_s r̂_s) / T`` to every step of a released segment, so the shaped values
    sum to the released ``R`` (docs/method.md §4c; the shaper then holds a segment until it is released)."""

    def predict(self, features: Tensor) -> Tensor:
        """``[N]`` per-step reward of raw features ``[N, F]`` (the subclass's)."""
        raise NotImplementedError

    def forward(self, features: Tensor) -> Tensor:
        return self.predict(features)

    @property
    def device(self) -> torch.device:
        """The device of its first parameter or buffer (the CPU for a model without tensors)."""
        for tensor in itertools.chain(self.parameters(), self.buffers()):
            return tensor.device
        return torch.device("cpu")

    @property
    def use_dense_features(self) -> bool:
        """Whether its inputs include the dense-reward columns (``inputs.dense``)."""
        return self.inputs.dense

    @property
    def use_next_obs(self) -> bool:
        """Whether its inputs end with the next observation (``inputs.next_obs``)."""
        return self.inputs.next_obs

    def features(
        self,
        obs: Array,
        action: Array,
        reward: Array,
        sparse_channel: int,
        next_obs: Array | None = None,
        terminated: Array | bool | None = None,
    ) -> Tensor:
        built = self.inputs.build(obs, action, reward, sparse_channel, next_obs, terminated=terminated)
        return built.to(self.device)


class NetworkRewardModelBase(RewardModelBase):
    """:class:`RewardModelBase` around stacked networks ``net``, the model the shared fit builds (ReSymNet's
    ensemble, RRD's network): ``net.n_members`` networks, each reading ``net.in_features`` columns."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    @property
    def n_members(self) -> int:
        """The stacked networks whose predictions the model averages."""
        return int(self.net.n_members)

    @property
    def in_features(self) -> int:
        """The width of a step's features the networks read."""
        return int(self.net.in_features)


__all__ = ["NetworkRewardModelBase", "RewardModel", "RewardModelBase"]
