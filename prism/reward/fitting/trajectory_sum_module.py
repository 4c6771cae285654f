"""A lone reward fit by trajectory-sum regression (paper eq. 1, or its randomized form): :class:`TrajectorySumModule`
(driven by :func:`prism.reward.fitting.fit.fit_trajectory_sums`, with a model's
:class:`~prism.reward.fitting.recipe.FitRecipe`).

The K networks are trained together yet each as if alone (:mod:`prism.reward.fitting.network_fit`: one
optimiser over stacked tensors, the per-network clip, early stopping with each network's best weights); here
each network's gradient is that of its own loss: the ragged layout backpropagates each member's loss right
after its forward pass (one member's graph alive at a time), the padded layout the *sum* of the members' losses.

Two layouts of the same training batches (see :mod:`prism.data.datamodule`), same maths:

- ragged (the default on a CPU): each member runs on its own unpadded steps (``forward_members``), so no FLOP
  goes to padding, and a member whose patience ran out is left out of the forward and backward passes
  altogether (its weights are held at its best ones, which the final restore would load anyway). A network
  with dropout (the recipe's ``dropout_stream``, ReSymNet's) draws its masks for the padded shape, exactly as
  the padded layout draws them, so both layouts fit the same weights (up to float rounding);
- padded (the default on a GPU, where the batched ``baddbmm`` is launch-bound and padding costs little): the
  reference layout, one ``[K, N_max, ·]`` pass; a stopped member keeps receiving updates that the restore
  discards.
"""

from __future__ import annotations

import re
import warnings

import torch
from torch import Tensor, nn
from torchmetrics import MeanSquaredError, PearsonCorrCoef

from prism.data.datamodule import MemberBatch, SegmentBatch
from prism.reward.config import RewardConfig
from prism.reward.fitting.network_fit import NetworkFitModule, validation_correlation
from prism.reward.fitting.recipe import DropoutStream, FitRecipe
from prism.reward.losses import LossTargets, segment_sums


def segment_errors(pred: Tensor, batch: SegmentBatch) -> tuple[Tensor, Tensor]:
    """Squared errors of a validation batch: ``(Σ_segments (Σ r̂ − R)² per member [K], segment sums [K, B])``
    for per-member per-step predictions ``pred [K, N]`` of the batch's shared steps."""
    n_seg = batch.targets.shape[-1]
    ids = batch.segment_ids.unsqueeze(0).expand(pred.shape[0], -1)
    sums = segment_sums(pred, ids, n_seg)  # [K, B]
    return (sums - batch.targets).pow(2).sum(dim=-1), sums


class TrajectorySumModule(NetworkFitModule):
    """A lone fit of a recipe's K networks by trajectory-sum regression (paper eq. 1); see the module docstring.

    Args:
        recipe: the model's network, optimiser, clip and loss (:class:`FitRecipe`).
        in_features: width of ``h_t``.
        config: the fit's shared keys (early stopping's ``patience``).
        seeds: one initialisation seed per member (``len(seeds)`` = K).
        log_prefix: TensorBoard namespace (``reward_fit``), as for :class:`NetworkFitModule`.
    """

    def __init__(
        self,
        recipe: FitRecipe,
        in_features: int,
        config: RewardConfig,
        seeds: list[int],
        log_prefix: str = "reward_fit",
    ):
        super().__init__(
            recipe.network(in_features, seeds),
            len(seeds),
            optimiser=recipe.optimiser,
            grad_clip=recipe.grad_clip,
            patience=config.patience,
            log_prefix=log_prefix,
        )
        self.recipe = recipe
        self.loss = recipe.loss
        # Manual optimisation: the ragged layout backpropagates each member's loss right after its forward
        # pass, so only one member's activations are alive at a time (see training_step).
        self.automatic_optimization = False
        self._noise: DropoutStream | None = None  # ragged layout's dropout draws (made on first use)
        self._ragged = False  # training batches seen so far are MemberBatch (validation then follows suit)
        self._reset_train_acc()
        # Validation metrics (torchmetrics: device-following states, synced across processes on compute):
        # each member's MSE of segment sums (early stopping's loss) and the ensemble mean's per-step Pearson
        # correlation with the hidden true reward.
        self.val_mse = MeanSquaredError(num_outputs=self.n_members)
        self.val_corr = PearsonCorrCoef()

    def start_from(self, net: nn.Module) -> None:
        """Warm start (``reward.warm_start``): begin from ``net``'s weights (a fitted network of this shape)
        instead of the fresh initialisation; they are also each member's best so far until validated."""
        self.net.load_state_dict(net.state_dict())
        self.best_state = {n: p.detach().clone() for n, p in self.net.named_parameters()}

    # ---- training ----------------------------------------------------------------------------------
    def _reset_train_acc(self) -> None:
        self._train_sse = torch.zeros(self.n_members, device=self.device, dtype=self.dtype)
        self._train_count = 0  # segments per trained member this epoch

    def training_step(self, batch: SegmentBatch | MemberBatch, batch_idx: int) -> None:
        n_seg = batch.targets.shape[-1]
        self._ragged = isinstance(batch, MemberBatch)
        if self._ragged and not self._trained:  # every member stopped (the trainer stops at this epoch's end)
            return
        optimizer = self.optimizers()
        optimizer.zero_grad()
        if isinstance(batch, MemberBatch):
            members = self._trained
            noise = self._dropout_noise(batch, members)
            losses = []
            for i, k in enumerate(members):
                # Member by member, forward then backward: one member's activations are alive at a time, not
                # K members' (the fit's peak memory). Members share no parameter, so each gradient slice is
                # the one a single backward of the summed loss gives, bit for bit.
                if noise is None:
                    pred = self.net.forward_members([batch.features[k]], [k])[0]
                else:
                    own_noise = [[block[i]] for block in noise]
                    pred = self.net.forward_members([batch.features[k]], [k], noise=own_noise)[0]
                loss = self.fit_loss(pred[None], LossTargets.of_member(batch, k))[0]
                self.manual_backward(loss)
                losses.append(loss.detach())
            self._train_sse[members] += torch.stack(losses) * n_seg
        else:
            pred = self.net(batch.features)  # [K, N], dropout active
            losses = self.fit_loss(pred, LossTargets.of_batch(batch))  # [K]
            # Sum, not mean, over members: each member's gradient is then exactly that of its own loss.
            self.manual_backward(losses.sum())
            self._train_sse += losses.detach() * n_seg
        self._train_count += n_seg
        optimizer.step()  # the per-member gradient clip runs first (on_before_optimizer_step)

    def _dropout_noise(self, batch: MemberBatch, members: list[int]) -> list[list[Tensor]] | None:
        """The ragged batch's dropout masks of the listed members (None: the network has no dropout)."""
        if self.recipe.dropout_stream is None:
            return None
        if self._noise is None:
            # The global generator as the padded layout's first dropout would find it.
            self._noise = self.recipe.dropout_stream(self.net, torch.get_rng_state())
        return self._noise.take(batch.steps, members, batch.next_steps)

    def fit_loss(self, pred: Tensor, targets: LossTargets) -> Tensor:
        """The training loss ``[M]`` of per-step predictions ``pred [M, N]``: the recipe's loss object (eq. 1 on
        whole segments, or the randomized return decomposition on the batch's sampled steps), its ``loss``
        term. The sums are taken in the networks' own dtype: under ``bf16-mixed`` the per-step predictions
        leave the matmuls in bfloat16, whose 8-bit mantissa would lose a 1000-step sum."""
        return self.loss(pred.to(self.dtype), targets)["loss"]

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if isinstance(batch, MemberBatch) and bool(self._frozen.any()):
            # A member left out still moves under AdamW (momentum, weight decay); hold it at its best weights
            # so validation and the ensemble correlation see the member the final restore will return.
            with torch.no_grad():
                for name, p in self.net.named_parameters():
                    p[self._frozen] = self.best_state[name][self._frozen]

    def on_train_epoch_end(self) -> None:
        self._log_train_loss()  # (an epoch without validation; otherwise logged with the validation's numbers)
        # The epoch's learning-rate decay: this module optimises manually, so Lightning does not step it.
        if self.lr_schedulers() is not None:
            with warnings.catch_warnings():
                # A fit resumed from a snapshot ends the snapshot's epoch again before its first optimiser step
                # in this process; torch then warns of a step order that did not happen (the decay is right:
                # the resumed fit equals the uninterrupted one bit for bit).
                warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
                self.lr_schedulers().step()

    def _log_train_loss(self) -> None:
        if not self._train_count:
            return
        train = self._train_sse / self._train_count
        self._reset_train_acc()
        metrics = {f"{self.log_prefix}/train_loss/m{k}": train[k] for k in self._trained}
        self.log_dict({**metrics, "step": float(self.current_epoch)}, on_epoch=True, on_step=False)

    # ---- validation ----------------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self.val_mse.reset()
        self.val_corr.reset()
        # Metric states keep float32 through module.double(); accumulate in the networks' own dtype.
        self.val_mse.set_dtype(self.dtype)
        self.val_corr.set_dtype(self.dtype)

    def validation_step(self, batch: SegmentBatch, batch_idx: int) -> None:
        if self._ragged:  # the same kernels as training (oneDNN GEMMs, fused LayerNorm)
            members = range(self.n_members)
            pred = torch.stack(self.net.forward_members([batch.features] * self.n_members, members))
        else:
            pred = self.net(batch.features)  # [K, N] (shared inputs; eval mode: no dropout)
        pred = pred.to(self.dtype)  # (bf16-mixed: sum in float32, see fit_loss)
        _, sums = segment_errors(pred, batch)  # [K, B] predicted segment sums
        # [B, K] predicted segment sums vs the released sums: one MSE column per member
        self.val_mse.update(sums.T, batch.targets.unsqueeze(-1).expand(-1, self.n_members))
        self.val_corr.update(pred.mean(dim=0), batch.true_sparse)

    def _validation_results(self) -> tuple[Tensor, Tensor] | None:
        """``(validation MSE of segment sums per network [K], ensemble correlation)`` of the epoch."""
        if not self.val_mse.update_called:
            return None
        return self.val_mse.compute().reshape(self.n_members), validation_correlation(self.val_corr)

    def _epoch_scalars(self, val: Tensor, corr: Tensor) -> dict[str, Tensor]:
        """Each network's loss, the ensemble's correlation, networks active."""
        return self._pooled_scalars(val, corr, range(self.n_members))

    def on_train_end(self) -> None:
        self.close()
        super().on_train_end()

    # ---- snapshots (a fit resumed mid-way: prism.reward.fitting.fit) ---------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The shared state (:meth:`NetworkFitModule.on_save_checkpoint`) and the layout's: taken at an epoch's
        end, where the dropout stream has no draw in flight (an epoch's last batch asks for none ahead); the
        padded layout draws its dropout from the global generator, which the shared state keeps."""
        super().on_save_checkpoint(checkpoint)
        checkpoint["prism_reward_fit"]["ragged"] = self._ragged
        noise = self._noise.generator.get_state() if self._noise is not None else None
        checkpoint["prism_reward_fit"]["noise_generator"] = noise

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        saved = checkpoint["prism_reward_fit"]
        self._ragged = bool(saved["ragged"])
        self.close()
        if saved["noise_generator"] is not None:
            assert self.recipe.dropout_stream is not None  # (only a network with dropout saved one)
            self._noise = self.recipe.dropout_stream(self.net, saved["noise_generator"])

    def close(self) -> None:
        """Stop the dropout stream's worker (should the fit end or stop on an exception)."""
        if self._noise is not None:
            self._noise.close()
            self._noise = None
