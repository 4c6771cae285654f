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

Training on a CPU takes the ragged path instead (:meth:`ReSymNetEnsemble.forward_members`): each member on
its own unpadded steps with oneDNN GEMMs and a fused LayerNorm, the dropout masks those :meth:`forward` would
draw (:meth:`ReSymNetEnsemble.dropout_noise`, drawn ahead by :class:`DropoutNoiseStream`). Same maths, up to
float rounding.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


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

    def member(self, k: int, x: Tensor) -> Tensor:
        """Member ``k`` alone on its own input ``x [N, in]``: ``x @ W[k] + b[k]`` → ``[N, out]``.

        fp32 on a CPU goes through oneDNN when :func:`onednn_linear_available`, otherwise ``addmm``.
        """
        w, b = self.weight[k], self.bias[k]
        if x.device.type == "cpu" and x.dtype == torch.float32 and onednn_linear_available():
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

    def dropout_noise(
        self,
        steps: Sequence[int],
        members: Sequence[int],
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> list[list[Tensor]] | None:
        """This step's dropout noise for :meth:`forward_members`, drawn exactly as :meth:`forward` draws it.

        Args:
            steps: ``N_k`` of every one of the K members (the padded layout's length is ``max(steps)``).
            members: the members to return noise for (the others' draws are made and discarded).
            generator: where the draws come from (torch's global generator by default).

        Returns:
            ``None`` when dropout is off (eval mode or p = 0), else for each residual block, for each listed
            member, ``[N_k, H]`` of ``{0, 1/(1 − p)}``.

        ``F.dropout`` on a CPU is ``x * empty_like(x).bernoulli_(1 − p) / (1 − p)``: on the padded
        ``[K, max(steps), H]`` input of :meth:`forward`, one Bernoulli tensor of that shape per block, in block
        order. The same tensors are drawn here (as ``bool``: the draws depend on the shape, not the dtype) and
        member k keeps rows ``[:N_k]`` of its slice — the rows :meth:`forward` applies to its real steps.
        """
        if not (self.training and self.dropout > 0):
            return None
        shape = (self.n_members, max(steps), self.hidden)
        keep = 1.0 - self.dropout
        device = self.ln_in.weight.device  # drawn on the CPU generator, used where the weights are
        noise = []
        for _ in self.blocks:
            mask = torch.empty(shape, dtype=torch.bool).bernoulli_(keep, generator=generator)
            noise.append([mask[k, : steps[k]].to(dtype).div_(keep).to(device) for k in members])
        return noise

    def forward_members(
        self,
        features: Sequence[Tensor],
        noise: Sequence[Sequence[Tensor]] | None,
        members: Sequence[int],
    ) -> list[Tensor]:
        """Per-step rewards of the listed members, each on its own unpadded steps (the ragged training path).

        Args:
            features: one ``[N_k, F]`` standardised input per listed member.
            noise: from :meth:`dropout_noise` for the same batch and members (``None``: no dropout).
            members: indices k of the members to run (members that stopped early are left out).

        Returns:
            One ``[N_k]`` prediction per listed member.

        Member k's result is that of :meth:`forward` on the padded ``[K, max_k N_k, F]`` batch restricted to
        its real rows, up to float rounding (the GEMM kernels differ): the same layers and the same dropout
        draws, but no matmul, LayerNorm or dropout is spent on padding rows or on left-out members.
        """
        preds = []
        for i, (x, k) in enumerate(zip(features, members)):
            h = F.relu(self.ln_in.member(k, self.inp.member(k, x)))
            for b, block in enumerate(self.blocks):
                z = F.relu(block["ln1"].member(k, block["fc1"].member(k, h)))
                if noise is not None:
                    z = z * noise[b][i]
                h = F.relu(h + block["ln2"].member(k, block["fc2"].member(k, z)))
            preds.append(self.out.member(k, h).squeeze(-1))
        return preds

    def hparams(self) -> dict[str, Any]:
        return {
            "n_members": self.n_members,
            "in_features": self.in_features,
            "hidden": self.hidden,
            "dropout": self.dropout,
            "residual": self.residual,
            "member_seeds": list(self.member_seeds),
        }


class DropoutNoiseStream:
    """Dropout noise for the ragged path, batch after batch, drawn one batch ahead on a worker thread.

    The draws come from a private generator started at ``generator_state`` (the global generator's state
    when the fit begins), so the stream is the one :meth:`ReSymNetEnsemble.forward` would have drawn from the
    global generator, batch by batch, and the worker never races anything else for it. Drawing the masks is
    serial (~10 ns a value on a CPU, ~20 % of a one-thread epoch); on the worker it overlaps the main
    thread's matmuls. With more than one torch thread the main thread's OpenMP team already has the cores,
    so the noise is drawn inline instead (a third thread would stall the team).

    Args:
        net: the ensemble (its mode, width and dropout decide the noise).
        generator_state: ``torch.get_rng_state()`` at the start of the fit.
    """

    def __init__(self, net: ReSymNetEnsemble, generator_state: Tensor):
        self.net = net
        self.generator = torch.Generator()
        self.generator.set_state(generator_state)
        self._executor: ThreadPoolExecutor | None = None
        self._pending: tuple[tuple[tuple[int, ...], tuple[int, ...]], Future] | None = None

    def _draw(self, steps: Sequence[int], members: Sequence[int]) -> list[list[Tensor]] | None:
        dtype = self.net.ln_in.weight.dtype
        return self.net.dropout_noise(steps, members, generator=self.generator, dtype=dtype)

    def take(
        self, steps: Sequence[int], members: Sequence[int], next_steps: Sequence[int] | None = None
    ) -> list[list[Tensor]] | None:
        """The noise of this batch (``steps``: every member's ``N_k``); starts drawing the next batch's
        (``next_steps``, same members) in the background when given."""
        key = (tuple(steps), tuple(members))
        if self._pending is not None:
            pending_key, future = self._pending
            self._pending = None
            noise = future.result()
            if pending_key != key:  # the generator has moved on: the stream cannot be repaired
                raise RuntimeError(f"DropoutNoiseStream: drew noise for {pending_key}, asked for {key}")
        else:
            noise = self._draw(steps, members)
        if next_steps is not None and noise is not None and torch.get_num_threads() == 1:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prism-dropout")
            future = self._executor.submit(self._draw, tuple(next_steps), tuple(members))
            self._pending = ((tuple(next_steps), tuple(members)), future)
        return noise

    def close(self) -> None:
        """Finish any draw in flight and stop the worker."""
        self._pending = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


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
