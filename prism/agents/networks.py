"""Networks of CAPQL (docs/method.md §6) with a leading *member* dimension.

Every learned tensor carries a leading member dimension S: a population of S independent agents (seeds) is
one set of stacked weights, and a forward pass is one batched matmul (``baddbmm``) per layer for all members.
A single run is the population of one (S = 1) — the same code path.

Shapes: inputs ``[S, B, d]`` (member-major). For S = 1 the member dimension may be left out (``[B, d]`` in,
``[B, ...]`` out), which keeps single-agent call sites and tests plain.

Initialisation: member s's slice of every layer is initialised like an independent orthogonally-initialised
``nn.Linear`` with zero bias, drawing from ``generators[s]`` when given — so member s of a population starts
from exactly the weights of the solo run with the same seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from prism.agents.config import TANH_LOG_PROB_FORMS
from prism.core.stacked_linear import init_member_, stacked_linear, stacked_linear_parameters

LOG_STD_MIN = -20.0
LOG_STD_MAX = 2.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)

Generators = Sequence[torch.Generator | None] | None


class StackedMLP(nn.Module):
    """``n`` independent ReLU MLPs evaluated together: layer j is one weight ``[n, d_in, d_out]``.

    ``forward(x [n, B, d_in]) -> [n, B, d_out]``; no activation after the last layer. ``init_order`` lists
    the member slices in the order their weights are drawn (see the subclasses). ``layer_norm``: each hidden
    layer is ``ReLU(LayerNorm(x W + b))``, the LayerNorm with a gain and a bias of each slice's own (starting
    at 1 and 0), as ``nn.LayerNorm`` per slice; off by default (the paper's networks have none).
    """

    def __init__(self, dims: Sequence[int], n: int, *, layer_norm: bool = False):
        super().__init__()
        self.n = n
        self.dims = tuple(dims)
        # Each layer is prism's stacked linear layer (prism.core.stacked_linear), kept as two parameter lists: the
        # state-dict keys (weights.j, biases.j) and parameter order every checkpoint so far was written with.
        layers = [stacked_linear_parameters(n, d_in, d_out) for d_in, d_out in zip(dims[:-1], dims[1:])]
        self.weights = nn.ParameterList([weight for weight, _ in layers])
        self.biases = nn.ParameterList([bias for _, bias in layers])
        self.layer_norm = layer_norm
        hidden = dims[1:-1] if layer_norm else ()  # (no parameters, so the default's state_dict is unchanged)
        self.norm_gains = nn.ParameterList([nn.Parameter(torch.ones(n, 1, d)) for d in hidden])
        self.norm_biases = nn.ParameterList([nn.Parameter(torch.zeros(n, 1, d)) for d in hidden])

    @torch.no_grad()
    def init_slice(self, index: int, generator: torch.Generator | None) -> None:
        """Orthogonal weights (on the ``[d_out, d_in]`` view, as ``nn.Linear``) and zero biases for slice
        ``index``, layer by layer, drawn from ``generator`` (the global RNG when None): the reward models'
        member init (:func:`prism.core.stacked_linear.init_member_`)."""
        for w, b in zip(self.weights, self.biases):
            init_member_(w[index], b[index], "orthogonal", generator)
        for gain, bias in zip(self.norm_gains, self.norm_biases):
            gain[index].fill_(1.0)
            bias[index].zero_()

    def layers(self) -> list[tuple[nn.Parameter, nn.Parameter]]:
        """``(weight, bias)`` per layer, read from the parameter lists' storage directly (indexing an
        ``nn.ParameterList`` costs a few microseconds a call, which adds up on the per-step hot path)."""
        return list(zip(self.weights._parameters.values(), self.biases._parameters.values()))

    def forward(
        self, x: torch.Tensor, *, detach_params: bool = False, member: int | None = None
    ) -> torch.Tensor:
        """``x [n, B, d_in] -> [n, B, d_out]``; with ``member`` only that slice runs: ``x [1, B, d_in]``."""
        layers = self.layers()
        norms = list(zip(self.norm_gains, self.norm_biases)) if self.layer_norm else []
        last = len(layers) - 1
        h = x
        for j, (w, b) in enumerate(layers):
            if member is not None:
                w, b = w[member : member + 1], b[member : member + 1]
            if detach_params:
                w, b = w.detach(), b.detach()
            h = stacked_linear(h, w, b)
            if j < last:
                if norms:
                    h = self._normalise(h, *norms[j], member, detach_params)
                h = torch.relu(h)
        return h

    @staticmethod
    def _normalise(
        h: torch.Tensor, gain: torch.Tensor, bias: torch.Tensor, member: int | None, detach_params: bool
    ) -> torch.Tensor:
        """LayerNorm over the last dimension with each slice's own gain and bias (``[n, 1, d]``)."""
        if member is not None:
            gain, bias = gain[member : member + 1], bias[member : member + 1]
        if detach_params:
            gain, bias = gain.detach(), bias.detach()
        return torch.nn.functional.layer_norm(h, h.shape[-1:]) * gain + bias


def _generator(generators: Generators, s: int) -> torch.Generator | None:
    return None if generators is None else generators[s]


class StackedPolicyNet(nn.Module):
    """An MLP on ``[s, w]`` per member for S members (ReLU, orthogonal init, zero biases; member s drawn from
    ``generators[s]``): the shared half of CAPQL's :class:`GaussianActor` and GPI-PD's ``DeterministicActor``.

    :meth:`evaluate` runs every member on ``[S, B, ·]`` inputs, or one ``member`` on ``[B, ·]`` inputs (for
    S = 1 the member dimension may be left out), and returns the raw ``[S, B, out_dim]`` (``[B, out_dim]``).
    """

    def __init__(
        self,
        obs_dim: int,
        n_objectives: int,
        out_dim: int,
        hidden: Sequence[int],
        members: int,
        generators: Generators,
    ):
        super().__init__()
        self.members = members
        self.net = StackedMLP([obs_dim + n_objectives, *hidden, out_dim], members)
        for s in range(members):
            self.net.init_slice(s, _generator(generators, s))

    def evaluate(self, obs: torch.Tensor, weight: torch.Tensor, member: int | None = None) -> torch.Tensor:
        flat = obs.dim() == 2
        if flat and member is None and self.members != 1:
            raise ValueError(
                f"{type(self).__name__}: [B, d] input needs member= for a population of {self.members}"
            )
        x = torch.cat([obs, weight], dim=-1)
        out = self.net(x.unsqueeze(0) if flat else x, member=member)
        return out[0] if flat else out


class GaussianActor(StackedPolicyNet):
    """π(a | s, w) for S members: an MLP on ``[s, w]`` (ReLU, orthogonal init, zero biases) per member.

    ``forward`` returns the pre-tanh mean μ and the log-std ℓ clamped to ``[−20, 2]``, each
    ``[S, B, act_dim]`` (``[B, act_dim]`` for an S = 1 call without the member dimension); the action is
    ``tanh(μ + exp(ℓ)·ε)`` (see :func:`sample_tanh_gaussian`). Mean and log-std come from one fused head.
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
        super().__init__(obs_dim, n_objectives, 2 * act_dim, hidden, members, generators)
        self.act_dim = act_dim

    def forward(
        self, obs: torch.Tensor, weight: torch.Tensor, member: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(μ, ℓ)`` of every member for ``[S, B, ·]`` inputs, or of one ``member`` for ``[B, ·]`` inputs."""
        mean, log_std = self.evaluate(obs, weight, member).split(self.act_dim, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)


TANH_LOG_PROB_EPSILON = 1e-6
"""ε of the ``epsilon`` form, ``log(1 − tanh² u + ε)`` (SB3's and morl-baselines' value)."""
TANH_LOG_PROB_CLAMP = 1e3
"""The ``epsilon`` form's bound on ``|log π(a)|`` (morl-baselines' CAPQL clamps to ±1e3)."""


def sample_tanh_gaussian(
    mean: torch.Tensor,
    log_std: torch.Tensor,
    generator: torch.Generator | None = None,
    log_prob_form: str = "exact",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reparameterised sample ``a = tanh(u)``, ``u = μ + σ ε``, and its log-density ``log π(a)`` ``[..., B]``.

    ``log π(a) = Σ_i [log N(u_i; μ_i, σ_i) − log(1 − tanh² u_i)]`` (change of variables through tanh), with
    ``log(1 − tanh² u) = 2(log 2 − u − softplus(−2u))`` — exact and stable where ``1 − tanh²`` underflows,
    so no ε fudge is needed. ``log N(u; μ, σ) = −ε²/2 − log σ − log √(2π)`` uses the drawn ε directly.

    ``log_prob_form="epsilon"`` is morl-baselines' (and SB3's) form instead: ``log(1 − tanh² u + 1e-6)``,
    then ``log π`` clamped to ±1e3. The two agree to ~1e-4 while ``|u| ≲ 3``; beyond ``|u| ≈ 7`` the
    epsilon form's correction stops growing (≤ −log 1e-6 ≈ 13.8 nats per dimension), so a saturating mean
    costs no further entropy and gets no gradient back from it, where the exact form keeps charging ~2|u|.
    The noise ε of every member is drawn in one call: this is the one random draw of an update whose values
    depend on the population's composition (see docs/ARCHITECTURE.md, population runs).
    """
    eps = torch.randn(mean.shape, generator=generator, device=mean.device, dtype=mean.dtype)
    u = mean + log_std.exp() * eps
    log_normal = -0.5 * eps.square() - log_std - _HALF_LOG_2PI
    action = torch.tanh(u)
    if log_prob_form == "exact":
        log_det = 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))
        return action, (log_normal - log_det).sum(dim=-1)
    if log_prob_form == "epsilon":
        log_det = torch.log(1.0 - action.square() + TANH_LOG_PROB_EPSILON)
        log_prob = (log_normal - log_det).sum(dim=-1)
        return action, log_prob.clamp(-TANH_LOG_PROB_CLAMP, TANH_LOG_PROB_CLAMP)
    raise ValueError(f"log_prob_form: expected one of {TANH_LOG_PROB_FORMS}, got {log_prob_form!r}")


class StackedCritics(nn.Module):
    """``n`` critics per member for S members, as the slices of one stacked network ``net`` (member-major:
    slice ``s·n + k`` is critic k of member s, initialised from ``generators[s]``).

    The shared half of CAPQL's :class:`VectorCriticEnsemble` and GPI-PD's ``VectorCritics``: the critics of a
    member all read the member's input, so :meth:`evaluate` fans ``x [S, B, in]`` out to the ``S·n`` slices
    and folds the result back to ``Q [S, n, B, L]``. Subclasses choose ``net`` (its ``init_slice`` and
    ``forward(h [S·n, B, in], **kwargs)``) and the keywords their ``forward`` passes on.
    """

    def __init__(self, net: nn.Module, n: int, members: int, generators: Generators):
        super().__init__()
        self.n = n
        self.members = members
        self.net = net
        for s in range(members):
            for k in range(n):
                self.net.init_slice(s * n + k, _generator(generators, s))

    def evaluate(self, x: torch.Tensor, **net_kwargs) -> torch.Tensor:
        """``x [S, B, in]`` -> ``Q [S, n, B, L]`` (``x [B, in]`` -> ``Q [n, B, L]`` when S = 1)."""
        flat = x.dim() == 2
        if flat:
            x = x.unsqueeze(0)
        members, batch, width = x.shape
        if members == 1:  # every critic reads the same input: a stride-0 view, no copy
            h = x.expand(self.n, batch, width)
        else:
            h = x.unsqueeze(1).expand(members, self.n, batch, width).reshape(members * self.n, batch, width)
        q = self.net(h, **net_kwargs).reshape(members, self.n, batch, -1)
        return q[0] if flat else q


class VectorCriticEnsemble(StackedCritics):
    """``n`` critics ``Q_k(s, a, w) ∈ R^L`` per member, for S members, evaluated with one ``baddbmm`` per layer.

    The S·n MLPs are the slices of one :class:`StackedMLP` (member-major: slice ``s·n + k`` is critic k of
    member s). Input is ``cat([s, a, w])``.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int] = (256, 256),
        n: int = 2,
        members: int = 1,
        generators: Generators = None,
        layer_norm: bool = False,
    ):
        net = StackedMLP([in_dim, *hidden, out_dim], members * n, layer_norm=layer_norm)
        super().__init__(net, n, members, generators)

    def forward(self, x: torch.Tensor, *, detach_params: bool = False) -> torch.Tensor:
        """``x [S, B, in]`` -> ``Q [S, n, B, L]`` (``x [B, in]`` -> ``Q [n, B, L]`` when S = 1).

        ``detach_params=True`` evaluates with detached weights: gradients still flow to ``x`` (the actor's
        actions) but never to the critic parameters, and no weight gradients are computed at all.
        """
        return self.evaluate(x, detach_params=detach_params)
