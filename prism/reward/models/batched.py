"""The batched layers of :class:`~prism.reward.models.resymnet.ReSymNetEnsemble`: K members' linear maps and
LayerNorms as stacked parameters, and the oneDNN fp32 linear kernel a lone member uses on a CPU (the ragged
training path)."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from prism.member_init import init_member_


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

    Why: on CPUs where MKL's fp32 GEMM does not take its fastest path (e.g. AMD EPYC with AVX-512, where this
    was measured ~2.3× slower than oneDNN), the fit's three GEMMs per layer (forward, input gradient,
    weight gradient) dominate an epoch. Same products, so the same maths up to float rounding.
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


class BatchedLinear(nn.Module):
    """K independent linear maps: ``y[k] = x[k] @ W[k] + b[k]`` with ``W [K, in, out]``, ``b [K, 1, out]``."""

    def __init__(self, n_members: int, in_features: int, out_features: int):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(n_members, in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(n_members, 1, out_features))

    def reset_member(self, k: int, generator: torch.Generator, kind: str) -> None:
        """Initialise member ``k`` (zero bias): ``kind`` is ``"kaiming"`` (ReSymNet's hidden layers), ``"output"``
        (ReSymNet's output layer: Xavier-uniform, gain 0.01) or ``"xavier"`` (Xavier-uniform, gain 1: every
        layer of RRD's network, TensorFlow's ``xavier_initializer``); the agents' stacked MLPs share it
        (:func:`prism.member_init.init_member_`)."""
        init_member_(self.weight[k], self.bias[k], kind, generator)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 2:
            # Input shared by all members ([N, in], e.g. at prediction time): one wide GEMM against the
            # members' weights laid side by side instead of K copies of the input.
            k, i, o = self.weight.shape
            wide = self.weight.permute(1, 0, 2).reshape(i, k * o)
            y = (x @ wide).view(x.shape[0], k, o).transpose(0, 1)
            return y + self.bias
        return torch.baddbmm(self.bias, x, self.weight)

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

    def member(self, k: int, x: Tensor) -> Tensor:
        """Member ``k`` alone on ``x [N, H]``: the affine fused into ``F.layer_norm`` (one kernel forward and
        backward instead of three; the same values up to float rounding)."""
        return F.layer_norm(x, (self.width,), self.weight[k, 0], self.bias[k, 0], self.eps)
