"""ReSymNet (docs/method.md §4) as a batched ensemble: K members stored as stacked weights and run with ``baddbmm``.

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

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from prism.core.stacked_linear import StackedLinear
from prism.data.features import FeatureLayout
from prism.reward.model import NetworkRewardModelBase
from prism.reward.models.batched import BatchedLayerNorm, member_seed_list


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
        self.inp = StackedLinear(n_members, in_features, hidden)
        self.ln_in = BatchedLayerNorm(n_members, hidden)
        self.blocks = nn.ModuleList()
        if residual:
            for _ in range(2):
                self.blocks.append(
                    nn.ModuleDict(
                        {
                            "fc1": StackedLinear(n_members, hidden, hidden),
                            "ln1": BatchedLayerNorm(n_members, hidden),
                            "fc2": StackedLinear(n_members, hidden, hidden),
                            "ln2": BatchedLayerNorm(n_members, hidden),
                        }
                    )
                )
        self.out = StackedLinear(n_members, hidden, 1)
        self.member_seeds = member_seed_list(n_members, member_seeds)
        for k, seed in enumerate(self.member_seeds):
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

    def forward(
        self, x: Tensor, *, dropout: bool | None = None, noise: Sequence[Tensor] | None = None
    ) -> Tensor:
        """Per-step rewards ``[K, N]`` from standardised inputs ``x`` (``[N, F]`` shared or ``[K, N, F]``).

        ``dropout=None`` follows ``self.training``; prediction passes ``False``. ``noise`` (one ``[K, N, H]``
        of ``{0, 1/(1 − p)}`` per residual block) replaces the dropout draws: ``F.dropout`` on a CPU is
        ``z · noise`` with such a tensor (the stacked population fit draws it per store).
        """
        active = self.training if dropout is None else dropout
        h = F.relu(self.ln_in(self.inp(x)))
        for b, block in enumerate(self.blocks):
            z = F.relu(block["ln1"](block["fc1"](h)))
            if noise is not None:
                z = z * noise[b]
            else:
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
        members: Sequence[int],
        noise: Sequence[Sequence[Tensor]] | None = None,
    ) -> list[Tensor]:
        """Per-step rewards of the listed members, each on its own unpadded steps (the ragged training path).

        Args:
            features: one ``[N_k, F]`` standardised input per listed member.
            members: indices k of the members to run (members that stopped early are left out).
            noise: from :meth:`dropout_noise` for the same batch and members (``None``: no dropout).

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
    serial, a sizeable share of a one-thread epoch (docs/benchmarks.md, "Where the time went"); on the worker
    it overlaps the main thread's matmuls. With more than one torch thread the main thread's OpenMP team already has the cores,
    so the noise is drawn inline instead (a third thread would stall the team).

    Args:
        net: the ensemble (its mode, width and dropout decide the noise).
        generator_state: ``torch.get_rng_state()`` at the start of the fit.
    """

    def __init__(self, net: nn.Module, generator_state: Tensor):
        self.net = net
        self.generator = torch.Generator()
        self.generator.set_state(generator_state)
        self._executor: ThreadPoolExecutor | None = None
        self._pending: tuple[tuple[tuple[int, ...], tuple[int, ...]], Future] | None = None

    def _draw(self, steps: Sequence[int], members: Sequence[int]) -> list[list[Tensor]] | None:
        dtype = next(self.net.parameters()).dtype  # (every parameter has the networks' one dtype)
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


class ReSymNetRewardModel(NetworkRewardModelBase):
    """The fitted reward model: input scaler (buffers) + :class:`ReSymNetEnsemble`.

    ``predict(h) = mean_k r̂_k((h − mean) / scale)`` with every member in eval mode (no dropout).
    ``use_dense_features`` and ``terminal_feature`` record which ``h_t`` layout the model was trained on (its
    ``inputs``), so shapers and relabelling build matching inputs; ``conserve_return`` tells its shaper to
    shift each released segment to sum to its return (docs/method.md §4c).
    """

    net: ReSymNetEnsemble

    def __init__(
        self,
        net: ReSymNetEnsemble,
        use_dense_features: bool = True,
        terminal_feature: bool = False,
        conserve_return: bool = False,
    ):
        super().__init__(net)
        self.inputs = FeatureLayout(dense=bool(use_dense_features), terminal=bool(terminal_feature))
        self.conserves_return = bool(conserve_return)
        self.register_buffer("feature_mean", torch.zeros(net.in_features))
        self.register_buffer("feature_scale", torch.ones(net.in_features))

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

    # ---- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Hyper-parameters and weights as plain Python values and tensors (``weights_only``-loadable)."""
        data: dict[str, Any] = {
            "hparams": self.net.hparams(),
            "use_dense_features": self.use_dense_features,
            "state": self.state_dict(),
        }
        # Written only when on, so the paper's model saves exactly the dict it always did.
        if self.inputs.terminal:
            data["terminal_feature"] = True
        if self.conserves_return:
            data["conserve_return"] = True
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReSymNetRewardModel:
        model = cls(
            ReSymNetEnsemble(**data["hparams"]),
            use_dense_features=data["use_dense_features"],
            terminal_feature=bool(data.get("terminal_feature", False)),
            conserve_return=bool(data.get("conserve_return", False)),
        )
        model.load_state_dict(data["state"])
        return model
