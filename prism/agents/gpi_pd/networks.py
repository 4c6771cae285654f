"""Networks of GPI-PD (continuous actions) with a leading *member* dimension, as prism/agents/networks.py.

- :class:`DeterministicActor`: ``μ(s, w)``, an MLP on ``[s, w]`` (ReLU, orthogonal init, zero biases) whose
  output is the *pre-tanh* action; the action is ``tanh`` of it (actions live in ``[−1, 1]``).
- :class:`VectorCritics`: ``n`` vector critics ``Q_k(s, a, w) ∈ R^L`` per member; every hidden layer is
  ``Linear → Dropout → LayerNorm → ReLU`` (morl-baselines' ``mlp(..., drop_rate=0.01, layer_norm=True)``),
  the output layer a plain ``Linear``.

Dropout draws its masks from an explicit ``torch.Generator`` (``F.dropout`` only uses the global RNG), so an
update is reproducible from the agent's own streams; on the CPU only the dropped positions are drawn
(:func:`seeded_dropout`). Dropout is active whenever the module is in training mode
— for the target critics too, as in morl-baselines, whose networks never leave training mode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from prism.agents.networks import Generators, StackedCritics, StackedMLP, StackedPolicyNet
from prism.core.stacked_linear import stacked_linear


def dropped_positions(n: int, p: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """The positions (long, ascending) that ``n`` i.i.d. Bernoulli(``p``) "drop" draws select, on the CPU.

    Drawn sparsely: the gaps between consecutive dropped positions of an i.i.d. Bernoulli(p) sequence are
    i.i.d. Geometric(p) on {1, 2, …}, so the dropped set is ``{G_1 + … + G_k − 1 < n}``. That costs about
    ``n·p`` random draws instead of ``n`` (the CPU ``bernoulli_`` kernel is serial, one draw per element,
    and was a fifth of a GPI-PD update at p = 0.01). Partial sums are float64 integers, exact up to 2^53.
    """
    if p >= 1.0:
        return torch.arange(n)
    mean = n * p
    chunk = int(mean + 6.0 * math.sqrt(mean * (1.0 - p)) + 16)  # almost always enough in one draw
    log_q = math.log1p(-p)

    def gaps() -> np.ndarray:
        # Geometric(p) by inversion, ⌈log U / log(1 − p)⌉ (what ``geometric_`` computes, vectorised), from the
        # torch generator (the seeded stream); the bookkeeping on ~10³ numbers in numpy.
        u = torch.rand(chunk, dtype=torch.float64, generator=generator)
        return u.log_().div_(log_q).ceil_().numpy()

    ends = np.cumsum(gaps())
    while ends[-1] <= n:
        ends = np.concatenate([ends, ends[-1] + np.cumsum(gaps())])
    return torch.from_numpy(ends[: np.searchsorted(ends, n, side="right")].astype(np.int64) - 1)


def seeded_dropout(h: torch.Tensor, p: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Inverted dropout ``h·m/(1 − p)`` with ``m_i ~ Bernoulli(1 − p)`` i.i.d., drawn from ``generator``.

    On the CPU the dropped positions come from :func:`dropped_positions` and are zeroed in ``h/(1 − p)``
    (the same values as ``h·m/(1 − p)``, up to the sign of a zero); elsewhere ``bernoulli_`` draws the mask
    (a parallel kernel there)."""
    keep = 1.0 - p
    if h.device.type != "cpu":
        return h * torch.empty_like(h).bernoulli_(keep, generator=generator) / keep
    # Flat and fresh (not a view), so the in-place fill's backward is a plain IndexFill, not a CopySlices.
    out = h.reshape(-1) / keep
    out.index_fill_(0, dropped_positions(h.numel(), p, generator), 0.0)
    return out.view(h.shape)


class DeterministicActor(StackedPolicyNet):
    """``μ(s, w)`` for S members: ``forward(obs [S, B, d], w [S, B, L]) -> pre-tanh action [S, B, act_dim]``.

    For S = 1 the member dimension may be left out (``[B, ·]`` in and out); ``member=`` runs one member's slice
    on ``[B, ·]`` inputs.
    """

    def __init__(
        self,
        obs_dim: int,
        n_objectives: int,
        act_dim: int,
        hidden: Sequence[int] = (256, 256),
        members: int = 1,
        generators: Generators = None,
    ):
        super().__init__(obs_dim, n_objectives, act_dim, hidden, members, generators)

    def forward(self, obs: torch.Tensor, weight: torch.Tensor, member: int | None = None) -> torch.Tensor:
        return self.evaluate(obs, weight, member)


class StackedNormMLP(nn.Module):
    """``n`` independent MLPs whose hidden layers are ``Linear → Dropout → LayerNorm → ReLU``.

    ``forward(x [n, B, d_in]) -> [n, B, d_out]``. Layer j's weight is one ``[n, d_in, d_out]`` tensor
    (``baddbmm``); LayerNorm has its own affine ``(γ, β)`` per slice, initialised to ``(1, 0)`` like
    ``nn.LayerNorm``.
    """

    def __init__(self, dims: Sequence[int], n: int, dropout: float = 0.01, layer_norm: bool = True):
        super().__init__()
        self.n = n
        self.dropout = float(dropout)
        self.layer_norm = layer_norm
        self.body = StackedMLP(dims, n)  # reuse its parameters and orthogonal init; forward is ours
        hidden = list(dims[1:-1])
        self.norm_scale = nn.ParameterList([nn.Parameter(torch.ones(n, 1, d)) for d in hidden])
        self.norm_shift = nn.ParameterList([nn.Parameter(torch.zeros(n, 1, d)) for d in hidden])

    def init_slice(self, index: int, generator: torch.Generator | None) -> None:
        """Orthogonal weights and zero biases for slice ``index`` (LayerNorm stays at its identity init)."""
        self.body.init_slice(index, generator)

    def forward(
        self, x: torch.Tensor, *, detach_params: bool = False, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        layers = self.body.layers()
        last = len(layers) - 1
        h = x
        for j, (w, b) in enumerate(layers):
            if detach_params:
                w, b = w.detach(), b.detach()
            h = stacked_linear(h, w, b)
            if j == last:
                break
            if self.training and self.dropout > 0.0:
                h = seeded_dropout(h, self.dropout, generator)
            if self.layer_norm:
                scale, shift = self.norm_scale[j], self.norm_shift[j]
                if detach_params:
                    scale, shift = scale.detach(), shift.detach()
                h = nn.functional.layer_norm(h, h.shape[-1:]) * scale + shift
            # In place: h is a fresh intermediate that no backward formula reads (the affine's add, dropout
            # and baddbmm keep their inputs, not their outputs).
            h = torch.relu_(h)
        return h


class VectorCritics(StackedCritics):
    """``n`` critics ``Q_k(s, a, w) ∈ R^L`` per member for S members (slice ``s·n + k`` is critic k of member s).

    ``forward(x [S, B, obs+act+L]) -> Q [S, n, B, L]`` (``[B, in] -> [n, B, L]`` for S = 1).
    ``detach_params=True``: gradients reach ``x`` (the actor's actions) but no critic parameter.
    """

    def __init__(
        self,
        in_dim: int,
        n_objectives: int,
        hidden: Sequence[int] = (256, 256),
        n: int = 2,
        members: int = 1,
        dropout: float = 0.01,
        layer_norm: bool = True,
        generators: Generators = None,
    ):
        net = StackedNormMLP([in_dim, *hidden, n_objectives], members * n, dropout, layer_norm)
        super().__init__(net, n, members, generators)

    def forward(
        self, x: torch.Tensor, *, detach_params: bool = False, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        return self.evaluate(x, detach_params=detach_params, generator=generator)
