"""One stacked-member linear layer, the building block of every stacked network in prism: the agents'
:class:`~prism.agents.networks.StackedMLP` (actors, critics, GPI-PD's models) and the reward models' networks
(:class:`~prism.reward.models.resymnet.ReSymNetEnsemble`, :class:`~prism.reward.models.rrd.RRDNetwork`).

A layer of K members is ``weight [K, in, out]`` and ``bias [K, 1, out]`` (:func:`stacked_linear_parameters`),
member k's output ``x[k] @ weight[k] + bias[k]``, all K in one batched matmul (:func:`stacked_linear`). Member
k's slice starts as an independent ``nn.Linear(in, out)`` would (:func:`init_member_`), so member k of a stack
starts from exactly the weights of a lone network drawn from the same generator.

:class:`StackedLinear` is that layer as a module, with the two other ways the reward fits run it: one input
shared by every member (prediction), and one member alone on its own steps (the ragged fit on a CPU, through
oneDNN's fp32 kernel where it is available). :class:`~prism.agents.networks.StackedMLP` keeps its layers as parameter lists (its
state-dict keys and parameter order are those of every checkpoint written so far) and runs them with the same
three functions.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

INITS = ("orthogonal", "kaiming", "output", "xavier")
"""``orthogonal``: the agents' layers (SB3/CleanRL's ``orthogonal_``, gain 1); ``kaiming``: ReSymNet's hidden
layers (Kaiming-uniform for ReLU); ``output``: ReSymNet's output layer (Xavier-uniform, gain 0.01);
``xavier``: every layer of RRD's network (Xavier-uniform, gain 1: TensorFlow's ``xavier_initializer``)."""


@torch.no_grad()
def init_member_(weight: Tensor, bias: Tensor, kind: str, generator: torch.Generator | None) -> None:
    """Initialise one member's slice in place: ``weight [in, out]`` by ``kind`` (:data:`INITS`), drawn from
    ``generator`` (the global RNG when None), and ``bias`` to zero."""
    # nn.init works on nn.Linear's [out, in] layout (fan_in = in): draw that contiguous, store it transposed
    # (an in-place draw on the transposed view could fill it in memory order, not nn.Linear's).
    w = weight.new_empty((weight.shape[1], weight.shape[0]))
    if kind == "orthogonal":
        nn.init.orthogonal_(w, generator=generator)
    elif kind == "kaiming":
        nn.init.kaiming_uniform_(w, nonlinearity="relu", generator=generator)
    elif kind == "output":
        nn.init.xavier_uniform_(w, gain=0.01, generator=generator)
    elif kind == "xavier":
        nn.init.xavier_uniform_(w, generator=generator)
    else:
        raise ValueError(f"init_member_: kind must be one of {', '.join(INITS)}, got {kind!r}")
    weight.copy_(w.T)
    bias.zero_()


def stacked_linear_parameters(
    n_members: int, in_features: int, out_features: int
) -> tuple[nn.Parameter, nn.Parameter]:
    """A layer's ``(weight [K, in, out], bias [K, 1, out])``, zero until :func:`init_member_` draws each slice."""
    weight = nn.Parameter(torch.zeros(n_members, in_features, out_features))
    bias = nn.Parameter(torch.zeros(n_members, 1, out_features))
    return weight, bias


def stacked_linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """``x [K, N, in] -> [K, N, out]``: every member's ``x[k] @ weight[k] + bias[k]`` in one ``baddbmm``."""
    return torch.baddbmm(bias, x, weight)


class StackedLinear(nn.Module):
    """K independent linear maps, ``y[k] = x[k] @ W[k] + b[k]`` with ``W [K, in, out]``, ``b [K, 1, out]`` (see the
    module docstring)."""

    def __init__(self, n_members: int, in_features: int, out_features: int):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight, self.bias = stacked_linear_parameters(n_members, in_features, out_features)

    def reset_member(self, k: int, generator: torch.Generator | None, kind: str) -> None:
        """Initialise member ``k`` (zero bias) by ``kind`` (:data:`INITS`), drawn from ``generator``."""
        init_member_(self.weight[k], self.bias[k], kind, generator)

    def forward(self, x: Tensor) -> Tensor:
        """``x [K, N, in]`` (each member its own input) or ``x [N, in]`` (one input for all) -> ``[K, N, out]``."""
        if x.dim() == 2:
            # Input shared by all members ([N, in], e.g. at prediction time): one wide GEMM against the
            # members' weights laid side by side instead of K copies of the input.
            k, i, o = self.weight.shape
            wide = self.weight.permute(1, 0, 2).reshape(i, k * o)
            y = (x @ wide).view(x.shape[0], k, o).transpose(0, 1)
            return y + self.bias
        return stacked_linear(x, self.weight, self.bias)

    def member(self, k: int, x: Tensor) -> Tensor:
        """Member ``k`` alone on its own input ``x [N, in]``: ``x @ W[k] + b[k]`` → ``[N, out]``.

        fp32 on a CPU goes through oneDNN when :func:`onednn_linear_available`, otherwise ``addmm`` (also under
        CPU autocast, ``reward.precision: bf16-mixed``: autocast casts ``addmm``, not the custom kernel).
        """
        w, b = self.weight[k], self.bias[k]
        if (
            x.device.type == "cpu"
            and x.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu")
            and onednn_linear_available()
        ):
            return _OneDNNMemberLinear.apply(x, w, b)
        return torch.addmm(b, x, w)


@functools.cache
def onednn_linear_available() -> bool:
    """Whether torch's oneDNN fp32 linear kernel (``torch.ops.mkldnn._linear_pointwise``) runs here and agrees
    with ``torch.addmm`` — checked once, on a small product, so a torch build without it (or a changed
    private op) falls back to ``addmm`` instead of failing or computing something else."""
    try:
        op = torch.ops.mkldnn._linear_pointwise
        g = torch.Generator().manual_seed(0)
        x, w, b = (
            torch.randn(37, 19, generator=g),
            torch.randn(19, 23, generator=g),
            torch.randn(23, generator=g),
        )
        return bool(
            torch.allclose(op(x, w.t(), b, "none", [], ""), torch.addmm(b, x, w), rtol=1e-4, atol=1e-5)
        )
    except Exception:  # noqa: BLE001 — any failure means "not usable here"
        return False


def _onednn_linear(x: Tensor, weight_out_in: Tensor, bias: Tensor | None) -> Tensor:
    """``x @ weight_out_in.T + bias`` by oneDNN (exact fp32 GEMM; ``weight_out_in`` may be a transposed view)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight_out_in, bias, "none", [], "")


class _OneDNNMemberLinear(torch.autograd.Function):
    """``x @ W + b`` for one member (``x [N, in]``, ``W [in, out]``, ``b [1, out]``), every GEMM by oneDNN.

    Why: on CPUs where MKL's fp32 GEMM does not take its fastest path (e.g. AMD EPYC with AVX-512; docs/benchmarks.md,
    "Where the time went"), the fit's three GEMMs per layer (forward, input gradient, weight gradient) dominate
    an epoch. Same products, so the same maths up to float rounding.
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        ctx.save_for_backward(x, weight)
        return _onednn_linear(x, weight.t(), bias.reshape(-1))

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _onednn_linear(grad, weight, None)  # grad @ W.T  ([in, out] read as [out', in'])
        if ctx.needs_input_grad[1]:
            grad_w = _onednn_linear(x.t(), grad.t(), None)  # x.T @ grad
        if ctx.needs_input_grad[2]:
            grad_b = grad.sum(dim=0, keepdim=True)
        return grad_x, grad_w, grad_b
