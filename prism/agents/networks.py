"""Networks of CAPQL (SPEC §6): a weight-conditioned tanh-Gaussian actor and a batched vector-critic ensemble."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

LOG_STD_MIN = -20.0
LOG_STD_MAX = 2.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


class GaussianActor(nn.Module):
    """π(a | s, w): MLP on ``[s, w]`` with ReLU hidden layers, orthogonal init and zero biases.

    ``forward`` returns the pre-tanh mean μ and the log-std ℓ clamped to ``[−20, 2]``; the action is
    ``tanh(μ + exp(ℓ)·ε)`` (see :func:`sample_tanh_gaussian`). Mean and log-std come from one fused head.
    """

    def __init__(self, obs_dim: int, n_objectives: int, act_dim: int, hidden: Sequence[int] = (256, 256)):
        super().__init__()
        layers: list[nn.Module] = []
        in_dim = obs_dim + n_objectives
        for width in hidden:
            layers += [nn.Linear(in_dim, width), nn.ReLU()]
            in_dim = width
        self.trunk = nn.Sequential(*layers)
        self.head = nn.Linear(in_dim, 2 * act_dim)
        self.act_dim = act_dim
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.orthogonal_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, obs: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.head(self.trunk(torch.cat([obs, weight], dim=-1))).split(self.act_dim, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)


def sample_tanh_gaussian(
    mean: torch.Tensor, log_std: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reparameterised sample ``a = tanh(u)``, ``u = μ + σ ε``, and its log-density ``log π(a)`` ``[B]``.

    ``log π(a) = Σ_i [log N(u_i; μ_i, σ_i) − log(1 − tanh² u_i)]`` (change of variables through tanh), with
    ``log(1 − tanh² u) = 2(log 2 − u − softplus(−2u))`` — exact and stable where ``1 − tanh²`` underflows,
    so no ε fudge is needed. ``log N(u; μ, σ) = −ε²/2 − log σ − log √(2π)`` uses the drawn ε directly.
    """
    eps = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    u = mean + log_std.exp() * eps
    log_normal = -0.5 * eps.square() - log_std - _HALF_LOG_2PI
    log_det = 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))
    return torch.tanh(u), (log_normal - log_det).sum(dim=-1)


class VectorCriticEnsemble(nn.Module):
    """``n`` independent MLP critics ``Q_k(s, a, w) ∈ R^L`` evaluated together with batched matmuls.

    Layer j of every member is one stacked weight ``[n, d_in, d_out]`` so a forward pass is one ``baddbmm``
    per layer for the whole ensemble instead of n separate MLPs. Each member's slice is initialised like an
    independent orthogonally-initialised ``nn.Linear`` with zero bias. Input is ``cat([s, a, w])``.
    """

    def __init__(self, in_dim: int, out_dim: int, hidden: Sequence[int] = (256, 256), n: int = 2):
        super().__init__()
        dims = [in_dim, *hidden, out_dim]
        self.n = n
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for d_in, d_out in zip(dims[:-1], dims[1:]):
            w = torch.empty(n, d_in, d_out)
            for k in range(n):
                # orthogonal_ on the [d_out, d_in] view matches nn.Linear's convention.
                nn.init.orthogonal_(w[k].T)
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(torch.zeros(n, 1, d_out)))

    def forward(self, x: torch.Tensor, *, detach_params: bool = False) -> torch.Tensor:
        """``x [B, in]`` -> ``Q [n, B, L]``.

        ``detach_params=True`` evaluates with detached weights: gradients still flow to ``x`` (the actor's
        actions) but never to the critic parameters, and no weight gradients are computed at all.
        """
        h = x.unsqueeze(0).expand(self.n, *x.shape)
        last = len(self.weights) - 1
        for j, (w, b) in enumerate(zip(self.weights, self.biases)):
            if detach_params:
                w, b = w.detach(), b.detach()
            h = torch.baddbmm(b, h, w)
            if j < last:
                h = torch.relu(h)
        return h
