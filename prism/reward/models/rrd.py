"""RRD, randomized return decomposition (Ren, Guo, Zhou and Peng, ICLR 2022, arXiv:2111.13485), as a reward model
fitted in the PRISM loop in ReSymNet's place (docs/method.md §4b).

RRD's model, as its released code defines it for MuJoCo (github.com/Stilwell-Git/Randomized-Return-Decomposition,
commit bc80473, ``algorithm/rrd.py``)::

    x = [s_t, a_t, s_t − s_{t+1}]            # note the sign: observation minus next observation
    r̂ = Linear(256→1)(ReLU(Linear(256→256)(ReLU(Linear(in→256)(x)))))

with Xavier-uniform weights and zero biases, raw (unnormalised) observations and the action in [−1, 1] (what
prism stores: the policy's tanh output, the env acting in the [−1, 1] box), one network (no ensemble, no
dropout), Adam at 3·10⁻⁴ without weight decay, gradient clip or schedule, and the randomized loss
(:func:`prism.reward.losses.randomized_sum_loss`) over batches of 4 episodes × K = 64 sampled steps.

It is fitted by the shared driver (:func:`prism.reward.fitting.fit.fit_trajectory_sums`) on the same
:class:`~prism.data.datamodule.TrajectorySumDataModule` as ReSymNet, whose features here are the raw
``[s_t, a_t, s_{t+1}]``: the network forms ``s_t − s_{t+1}`` itself, so the store, the shaper and every
diagnostic hand it a step's raw data (:func:`prism.data.features.build_features` with ``next_obs``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import Logger
from torch import Tensor, nn

from prism.core.stacked_linear import StackedLinear
from prism.data.datamodule import TrajectorySumDataModule
from prism.data.features import FeatureLayout
from prism.data.segments import SegmentStore
from prism.reward.config import RRDRewardConfig
from prism.reward.fitting.fit import FitOptions, fit_trajectory_sums
from prism.reward.fitting.fitter import FittedReward
from prism.reward.fitting.recipe import FitRecipe, Optimisers
from prism.reward.model import NetworkRewardModelBase
from prism.reward.models.batched import member_seed_list

if TYPE_CHECKING:
    from typing_extensions import Unpack


class RRDNetwork(nn.Module):
    """RRD's reward network ``r̂(s, a, s')`` (see the module docstring), as K stacked copies (RRD fits K = 1) so
    that the ensemble machinery of :class:`~prism.reward.fitting.trajectory_sum_module.TrajectorySumModule` fits it unchanged.

    Args:
        obs_dim, act_dim: widths of ``s`` and ``a``; the input is ``[s, a, s']`` (``2·obs_dim + act_dim``).
        hidden: width of both hidden layers (256).
        n_members: stacked copies (1).
        member_seeds: one initialisation seed per copy (default ``0..K-1``).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden: int = 256,
        n_members: int = 1,
        member_seeds: Sequence[int] | None = None,
    ):
        super().__init__()
        self.obs_dim, self.act_dim, self.hidden, self.n_members = obs_dim, act_dim, hidden, n_members
        self.in_features = 2 * obs_dim + act_dim
        self.fc1 = StackedLinear(n_members, self.in_features, hidden)
        self.fc2 = StackedLinear(n_members, hidden, hidden)
        self.out = StackedLinear(n_members, hidden, 1)
        self.member_seeds = member_seed_list(n_members, member_seeds)
        for k, seed in enumerate(self.member_seeds):
            g = torch.Generator().manual_seed(int(seed))
            for layer in (self.fc1, self.fc2, self.out):  # tf.contrib xavier_initializer: Glorot-uniform
                layer.reset_member(k, g, "xavier")

    def transition_input(self, x: Tensor) -> Tensor:
        """``[s, a, s']`` → RRD's input ``[s, a, s − s']`` (the code's ``obs − obs_next``, not ``s' − s``)."""
        o, a = self.obs_dim, self.act_dim
        return torch.cat([x[..., : o + a], x[..., :o] - x[..., o + a :]], dim=-1)

    def forward(self, x: Tensor) -> Tensor:
        """Per-step rewards ``[K, N]`` from ``x = [s, a, s']`` (``[N, F]`` shared or ``[K, N, F]``)."""
        h = F.relu(self.fc1(self.transition_input(x)))
        h = F.relu(self.fc2(h))
        return self.out(h).squeeze(-1)

    def forward_members(self, features: Sequence[Tensor], members: Sequence[int]) -> list[Tensor]:
        """Copy ``k`` on its own ``[N_k, F]`` steps for each listed ``k`` (the fit's ragged layout)."""
        preds = []
        for x, k in zip(features, members):
            h = F.relu(self.fc1.member(k, self.transition_input(x)))
            h = F.relu(self.fc2.member(k, h))
            preds.append(self.out.member(k, h).squeeze(-1))
        return preds

    def hparams(self) -> dict[str, Any]:
        return {
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "hidden": self.hidden,
            "n_members": self.n_members,
            "member_seeds": list(self.member_seeds),
        }


class RRDRewardModel(NetworkRewardModelBase):
    """A fitted RRD reward model: ``predict([s, a, s'] [N, 2·obs + act]) -> [N]`` (the mean over its stacked
    copies: the one network when K = 1). It reads the next observation and no dense reward (``inputs``); its
    inputs are raw, so it has no scaler."""

    inputs = FeatureLayout(dense=False, next_obs=True)

    net: RRDNetwork

    def __init__(self, net: RRDNetwork):
        super().__init__(net)

    def predict(self, features: Tensor) -> Tensor:
        """``[N]`` per-step reward for ``features = [s, a, s'] [N, F]``, computed where the network lives (the
        features are moved there: a replay batch may be on another device)."""
        with torch.no_grad():
            return self.net(features.to(self.device)).mean(dim=0)

    def to_dict(self) -> dict[str, Any]:
        """Hyper-parameters and weights as plain values and tensors (``weights_only``-loadable)."""
        return {"hparams": self.net.hparams(), "state": self.state_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RRDRewardModel:
        model = cls(RRDNetwork(**data["hparams"]))
        model.load_state_dict(data["state"])
        return model.eval()


def rrd_optimiser(config: RRDRewardConfig) -> Callable[[Iterable[nn.Parameter]], Optimisers]:
    """RRD's optimiser: Adam at ``reward.rrd.lr``, no weight decay and no learning-rate schedule (the code's
    ``tf.train.AdamOptimizer(r_lr)``)."""

    def adam(parameters: Iterable[nn.Parameter]) -> Optimisers:
        return torch.optim.Adam(parameters, lr=config.rrd.lr), None

    return adam


def rrd_recipe(config: RRDRewardConfig, obs_dim: int, act_dim: int) -> FitRecipe:
    """RRD's fit for the shared driver: one network on raw ``[s, a, s']``, Adam, no gradient clip, and
    ``reward.rrd.batch_size`` segments × ``reward.sampled_steps`` sampled steps per batch (the randomized loss,
    always, with ``reward.bias_correction``, off by default, and ``reward.sampling``)."""

    def fitted(net: nn.Module, dm: TrajectorySumDataModule) -> RRDRewardModel:
        assert isinstance(net, RRDNetwork)  # (the network this recipe builds)
        return RRDRewardModel(net)

    return FitRecipe(
        n_members=1,
        batch_size=config.rrd.batch_size,
        inputs=RRDRewardModel.inputs,
        standardise=False,  # the released code's default for SAC: obs_normalization off
        loss=config.fit_loss(),  # (RRD's config: always the randomized loss)
        network=lambda in_features, seeds: RRDNetwork(obs_dim, act_dim, config.rrd.hidden, len(seeds), seeds),
        optimiser=rrd_optimiser(config),
        grad_clip=None,  # RRD clips no gradient
        model=fitted,
    )


def fit_rrd_model(
    store: SegmentStore,
    config: RRDRewardConfig,
    logger: Logger | None = None,
    seed: int = 0,
    **options: Unpack[FitOptions],
) -> FittedReward:
    """Fit a fresh RRD model on every segment of ``store`` (which must keep next observations): the shared
    driver :func:`~prism.reward.fitting.fit.fit_trajectory_sums` with :func:`rrd_recipe`; the arguments are that
    function's (snapshots and ``resume`` inside a fit, ``init``, an :class:`RRDRewardModel`, for
    ``reward.warm_start``)."""
    if not store.has_next_obs:
        raise ValueError(
            "reward.name: rrd reads each step's next observation, but this segment store keeps none "
            "(collect into SegmentStore(..., next_obs=True))"
        )
    return fit_trajectory_sums(
        store, config, rrd_recipe(config, store.obs_dim, store.act_dim), logger, seed, **options
    )
