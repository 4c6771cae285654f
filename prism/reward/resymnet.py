"""ReSymNet (SPEC §4) as a batched ensemble: K members stored as stacked weights and run with ``baddbmm``.

Architecture of one member (hidden H = 256, dropout 0.3)::

    h = ReLU(LN(Linear(in→H)(x)))
    h = ReLU(h + LN(Linear(H→H)(Dropout(ReLU(LN(Linear(H→H)(h)))))))   # residual block 1
    h = ReLU(h + LN(Linear(H→H)(Dropout(ReLU(LN(Linear(H→H)(h)))))))   # residual block 2
    r̂ = Linear(H→1)(h)

"w/o residual" ablation: ``Linear→LN→ReLU→Linear(→1)``. Hidden weights are Kaiming-uniform (ReLU gain) with
zero biases; the output layer is Xavier-uniform with gain 0.01 (initial predictions ≈ 0). Every member is
initialised from its own seed, so member k of an ensemble starts exactly where a lone model with that seed
would.

Every parameter has the member index as its leading dimension, so one optimiser over the stacked tensors is
K independent optimisers (Adam/AdamW act element-wise) and a forward pass is a handful of batched matmuls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class BatchedLinear(nn.Module):
    """K independent linear maps: ``y[k] = x[k] @ W[k] + b[k]`` with ``W [K, in, out]``, ``b [K, 1, out]``."""

    def __init__(self, n_members: int, in_features: int, out_features: int):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(n_members, in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(n_members, 1, out_features))

    def reset_member(self, k: int, generator: torch.Generator, kind: str) -> None:
        """Initialise member ``k``: ``kind`` is ``"kaiming"`` (hidden) or ``"output"`` (Xavier, gain 0.01)."""
        # nn.init works on the [out, in] layout of nn.Linear (fan_in = in); initialise that, store transposed.
        w = torch.empty(self.out_features, self.in_features)
        if kind == "kaiming":
            nn.init.kaiming_uniform_(w, nonlinearity="relu", generator=generator)
        elif kind == "output":
            nn.init.xavier_uniform_(w, gain=0.01, generator=generator)
        else:
            raise ValueError(kind)
        with torch.no_grad():
            self.weight[k].copy_(w.T)
            self.bias[k].zero_()

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 2:
            # Input shared by all members ([N, in], e.g. at prediction time): one wide GEMM against the
            # members' weights laid side by side instead of K copies of the input.
            k, i, o = self.weight.shape
            wide = self.weight.permute(1, 0, 2).reshape(i, k * o)
            y = (x @ wide).view(x.shape[0], k, o).transpose(0, 1)
            return y + self.bias
        return torch.baddbmm(self.bias, x, self.weight)


class BatchedLayerNorm(nn.Module):
    """LayerNorm over the last dim with a separate affine per member (``weight``/``bias`` ``[K, 1, H]``)."""

    def __init__(self, n_members: int, width: int, eps: float = 1e-5):
        super().__init__()
        self.width, self.eps = width, eps
        self.weight = nn.Parameter(torch.ones(n_members, 1, width))
        self.bias = nn.Parameter(torch.zeros(n_members, 1, width))

    def reset_member(self, k: int) -> None:
        with torch.no_grad():
            self.weight[k].fill_(1.0)
            self.bias[k].zero_()

    def forward(self, x: Tensor) -> Tensor:
        return torch.addcmul(self.bias, F.layer_norm(x, (self.width,), eps=self.eps), self.weight)


class ReSymNetEnsemble(nn.Module):
    """K ReSymNets with stacked weights; ``forward(x)`` returns per-step rewards ``[K, N]``.

    Args:
        n_members: K.
        in_features: width of ``h_t``.
        hidden: H.
        dropout: dropout probability inside the residual blocks.
        residual: two residual blocks (True) or the "w/o residual" ablation.
        member_seeds: one init seed per member (default ``0..K-1``).
    """

    def __init__(
        self,
        n_members: int,
        in_features: int,
        hidden: int = 256,
        dropout: float = 0.3,
        residual: bool = True,
        member_seeds: Sequence[int] | None = None,
    ):
        super().__init__()
        self.n_members, self.in_features, self.hidden = n_members, in_features, hidden
        self.dropout, self.residual = float(dropout), bool(residual)
        self.inp = BatchedLinear(n_members, in_features, hidden)
        self.ln_in = BatchedLayerNorm(n_members, hidden)
        self.blocks = nn.ModuleList()
        if residual:
            for _ in range(2):
                self.blocks.append(
                    nn.ModuleDict(
                        {
                            "fc1": BatchedLinear(n_members, hidden, hidden),
                            "ln1": BatchedLayerNorm(n_members, hidden),
                            "fc2": BatchedLinear(n_members, hidden, hidden),
                            "ln2": BatchedLayerNorm(n_members, hidden),
                        }
                    )
                )
        self.out = BatchedLinear(n_members, hidden, 1)
        seeds = list(range(n_members)) if member_seeds is None else [int(s) for s in member_seeds]
        if len(seeds) != n_members:
            raise ValueError(f"member_seeds: expected {n_members} seeds, got {len(seeds)}")
        self.member_seeds = seeds
        for k, seed in enumerate(seeds):
            self.reset_member(k, seed)

    def reset_member(self, k: int, seed: int) -> None:
        """(Re)initialise member ``k`` from ``seed`` (layers in forward order)."""
        g = torch.Generator().manual_seed(int(seed))
        self.inp.reset_member(k, g, "kaiming")
        self.ln_in.reset_member(k)
        for block in self.blocks:
            block["fc1"].reset_member(k, g, "kaiming")
            block["ln1"].reset_member(k)
            block["fc2"].reset_member(k, g, "kaiming")
            block["ln2"].reset_member(k)
        self.out.reset_member(k, g, "output")

    def forward(self, x: Tensor, *, dropout: bool | None = None) -> Tensor:
        """Per-step rewards ``[K, N]`` from standardised inputs ``x`` (``[N, F]`` shared or ``[K, N, F]``).

        ``dropout=None`` follows ``self.training``; prediction passes ``False``.
        """
        active = self.training if dropout is None else dropout
        h = F.relu(self.ln_in(self.inp(x)))
        for block in self.blocks:
            z = F.relu(block["ln1"](block["fc1"](h)))
            z = F.dropout(z, self.dropout, training=active and self.dropout > 0)
            h = F.relu(h + block["ln2"](block["fc2"](z)))
        return self.out(h).squeeze(-1)

    def hparams(self) -> dict[str, Any]:
        return {
            "n_members": self.n_members,
            "in_features": self.in_features,
            "hidden": self.hidden,
            "dropout": self.dropout,
            "residual": self.residual,
            "member_seeds": list(self.member_seeds),
        }


class RewardEnsemble(nn.Module):
    """The fitted reward model: input scaler (buffers) + :class:`ReSymNetEnsemble`.

    ``predict(h) = mean_k r̂_k((h − mean) / scale)`` with every member in eval mode (no dropout).
    ``use_dense_features`` records which ``h_t`` layout the model was trained on, so shapers and relabelling
    build matching inputs.
    """

    def __init__(self, net: ReSymNetEnsemble, use_dense_features: bool = True):
        super().__init__()
        self.net = net
        self.use_dense_features = bool(use_dense_features)
        self.register_buffer("feature_mean", torch.zeros(net.in_features))
        self.register_buffer("feature_scale", torch.ones(net.in_features))
        self.fit_summary: Any = None  # set by fit_reward_model (a FitSummary)

    @property
    def in_features(self) -> int:
        return self.net.in_features

    @property
    def n_members(self) -> int:
        return self.net.n_members

    def set_scaler(self, mean: Tensor, scale: Tensor) -> None:
        self.feature_mean.copy_(mean)
        self.feature_scale.copy_(scale)

    def standardise(self, features: Tensor) -> Tensor:
        return (features - self.feature_mean) / self.feature_scale

    def member_predictions(self, features: Tensor) -> Tensor:
        """``[K, N]`` per-member per-step predictions (eval mode, no gradient)."""
        with torch.no_grad():
            return self.net(self.standardise(features), dropout=False)

    def predict(self, features: Tensor) -> Tensor:
        """``[N]`` ensemble-mean per-step reward for raw (unstandardised) features ``[N, F]``."""
        return self.member_predictions(features).mean(dim=0)

    def forward(self, features: Tensor) -> Tensor:
        return self.predict(features)

    # ---- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Hyper-parameters and weights as plain Python values and tensors (``weights_only``-loadable)."""
        return {
            "hparams": self.net.hparams(),
            "use_dense_features": self.use_dense_features,
            "state": self.state_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardEnsemble:
        model = cls(ReSymNetEnsemble(**data["hparams"]), use_dense_features=data["use_dense_features"])
        model.load_state_dict(data["state"])
        return model


def standardisation_stats(features: Tensor, eps: float = 1e-8) -> tuple[Tensor, Tensor]:
    """Column mean and population std of ``features [N, F]``; a (near-)zero-variance column gets scale 1."""
    mean = features.mean(dim=0)
    std = features.std(dim=0, correction=0)
    # A constant feature (e.g. an always-0 dense channel) would otherwise divide by 0.
    scale = torch.where(std > eps, std, torch.ones_like(std))
    return mean, scale


def count_parameters_per_member(net: ReSymNetEnsemble) -> int:
    return sum(math.prod(p.shape[1:]) for p in net.parameters())
