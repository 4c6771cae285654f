"""Training the ReSymNet ensemble with Lightning (docs/method.md §4): :class:`TrajectorySumModule` (driven by
:func:`prism.reward.fitting.fit.fit_resymnet_model`).

All K members are trained in one pass over stacked weights, yet each behaves as if trained alone:

- its own initialisation (seed) and its own shuffle order (see :class:`TrajectorySumDataModule`);
- member k's gradient is that of its own loss: the ragged layout backpropagates each member's loss right after
  its forward pass (one member's graph alive at a time), the padded layout the *sum* of the members' losses;
- AdamW acts element-wise, so one optimiser over stacked tensors is K optimisers;
- the gradient-norm clip is computed and applied per member (a global clip would couple them);
- early stopping is tracked per member: each keeps a copy of its weights from its best validation epoch and
  stops counting once its patience runs out; at the end every member is restored to its own best weights.
  Training continues while any member is still improving.

Two layouts of the same training batches (see :mod:`prism.data.datamodule`), same maths:

- ragged (the default on a CPU): each member runs on its own unpadded steps
  (:meth:`ReSymNetEnsemble.forward_members`), so no FLOP goes to padding, and a member whose patience ran out
  is left out of the forward and backward passes altogether (its weights are held at its best ones, which
  the final restore would load anyway). Dropout masks are drawn for the padded shape, exactly as the padded
  layout draws them, so both layouts fit the same weights (up to float rounding);
- padded (the default on a GPU, where the batched ``baddbmm`` is launch-bound and padding costs little): the
  reference layout, one ``[K, N_max, ·]`` pass; a stopped member keeps receiving updates that the restore
  discards.
"""

from __future__ import annotations

import math
import re
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import MeanSquaredError, PearsonCorrCoef

from prism.data.datamodule import MemberBatch, SegmentBatch
from prism.data.features import FeatureLayout
from prism.reward.config import RewardConfig
from prism.reward.losses import FitLoss, segment_sums
from prism.reward.models.resymnet import DropoutNoiseStream

if TYPE_CHECKING:
    from prism.data.datamodule import TrajectorySumDataModule
    from prism.reward.fitting.fitter import RewardModel

Optimisers = tuple[torch.optim.Optimizer, "torch.optim.lr_scheduler.LRScheduler | None"]


@dataclass(frozen=True)
class FitRecipe:
    """What a reward model brings to the shared fit (:func:`prism.reward.fitting.fit.fit_trajectory_sums`, driving a
    :class:`TrajectorySumModule`): its network, optimiser, gradient clip, loss, batch and input columns. The
    rest (the seeded split, early stopping on whole validation segments, snapshots and resume, warm start,
    precision, threads, the :class:`~prism.reward.fitting.fitter.FitSummary`) is the driver's."""

    n_members: int
    """Networks fitted together (ReSymNet's ensemble K; 1 for a single network)."""
    batch_size: int
    """Segments per training batch."""
    inputs: FeatureLayout
    """The column groups of a step the network reads (dense rewards, ``s_{t+1}``)."""
    standardise: bool
    """Inputs z-scored with the training split's scaler (False: raw)."""
    loss: FitLoss
    """The training loss, chosen once; its sampler decides which steps a training batch holds."""
    network: Callable[[int, list[int]], nn.Module]
    """``network(in_features, member_seeds)``: the stacked networks (member index first in every parameter),
    ``forward(x) -> [K, N]`` and ``forward_members(features, members) -> [N_k]`` per listed member."""
    optimiser: Callable[[Iterable[nn.Parameter]], Optimisers]
    """``optimiser(parameters) -> (optimiser, per-epoch scheduler or None)``."""
    grad_clip: float | None
    """Gradient-norm clip per member (:func:`clip_per_member_`), or None."""
    model: Callable[[TrajectorySumModule, TrajectorySumDataModule], RewardModel]
    """``model(fitted_module, datamodule)``: the fitted model on the CPU, its ``.net`` the module's network."""
    dropout_noise: bool = False
    """The network has dropout (ReSymNet's): the ragged layout hands each member the padded layout's masks
    (:class:`~prism.reward.models.resymnet.DropoutNoiseStream`, ``forward_members(..., noise=)``)."""


def segment_errors(pred: Tensor, batch: SegmentBatch) -> tuple[Tensor, Tensor]:
    """Squared errors of a validation batch: ``(Σ_segments (Σ r̂ − R)² per member [K], segment sums [K, B])``
    for per-member per-step predictions ``pred [K, N]`` of the batch's shared steps."""
    n_seg = batch.targets.shape[-1]
    ids = batch.segment_ids.unsqueeze(0).expand(pred.shape[0], -1)
    sums = segment_sums(pred, ids, n_seg)  # [K, B]
    return (sums - batch.targets).pow(2).sum(dim=-1), sums


class TrajectorySumModule(L.LightningModule):
    """Fits a :class:`ReSymNetEnsemble` by trajectory-sum regression (paper eq. 1); see the module docstring.

    Args:
        recipe: the model's network, optimiser, clip and loss (:class:`FitRecipe`).
        in_features: width of ``h_t``.
        config: the fit's shared keys (early stopping's ``patience``).
        seeds: one initialisation seed per member (``len(seeds)`` = K).
        log_prefix: TensorBoard namespace (``reward_fit``); every scalar is logged against the epoch (the
            ``step`` key Lightning reads as the x-axis), not against optimiser steps.
    """

    def __init__(
        self,
        recipe: FitRecipe,
        in_features: int,
        config: RewardConfig,
        seeds: list[int],
        log_prefix: str = "reward_fit",
    ):
        super().__init__()
        self.recipe = recipe
        self.config = config
        self.loss = recipe.loss
        self.log_prefix = log_prefix
        k = len(seeds)
        self.net = recipe.network(in_features, seeds)
        # Manual optimisation: the ragged layout backpropagates each member's loss right after its forward
        # pass, so only one member's activations are alive at a time (see training_step).
        self.automatic_optimization = False
        self.register_buffer("best_val_loss", torch.full((k,), math.inf))
        self.register_buffer("best_epoch", torch.full((k,), -1, dtype=torch.long))
        self.register_buffer("stopped", torch.zeros(k, dtype=torch.bool))
        self.register_buffer("epochs_run", torch.zeros(k, dtype=torch.long))
        self.best_state = {n: p.detach().clone() for n, p in self.net.named_parameters()}
        self.val_history: list[Tensor] = []  # per-epoch validation loss [K]
        self.corr_history: list[float] = []
        self.epoch_seconds: list[float] = []  # wall time of each epoch, training + validation
        self._epoch_start = 0.0
        self._frozen = torch.zeros(k, dtype=torch.bool)
        self._trained = list(range(k))
        self._noise: DropoutNoiseStream | None = None  # ragged layout's dropout draws (made on first use)
        self._ragged = False  # training batches seen so far are MemberBatch (validation then follows suit)
        self._reset_train_acc()
        # Validation metrics (torchmetrics: device-following states, synced across processes on compute):
        # each member's MSE of segment sums (early stopping's loss) and the ensemble mean's per-step Pearson
        # correlation with the hidden true reward.
        self.val_mse = MeanSquaredError(num_outputs=k)
        self.val_corr = PearsonCorrCoef()

    @property
    def n_members(self) -> int:
        return self.net.n_members

    def start_from(self, net: nn.Module) -> None:
        """Warm start (``reward.warm_start``): begin from ``net``'s weights (a fitted network of this shape)
        instead of the fresh initialisation; they are also each member's best so far until validated."""
        self.net.load_state_dict(net.state_dict())
        self.best_state = {n: p.detach().clone() for n, p in self.net.named_parameters()}

    # ---- accumulators ------------------------------------------------------------------------------
    def _reset_train_acc(self) -> None:
        self._train_sse = torch.zeros(self.n_members, device=self.device, dtype=self.dtype)
        self._train_count = 0

    # ---- training ----------------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        params = dict(self.net.named_parameters())
        self.best_state = {n: t.to(params[n]) for n, t in self.best_state.items()}  # device and dtype

    def configure_optimizers(self) -> Any:
        opt, sched = self.recipe.optimiser(self.net.parameters())
        if sched is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    def on_train_epoch_start(self) -> None:
        self._epoch_start = time.perf_counter()
        self._reset_train_acc()
        # Members whose patience ran out (and that have best weights to return to) sit out this epoch.
        self._frozen = self.stopped & (self.best_epoch >= 0)
        self._trained = [k for k, frozen in enumerate(self._frozen.tolist()) if not frozen]

    def training_step(self, batch: SegmentBatch | MemberBatch, batch_idx: int) -> None:
        n_seg = batch.targets.shape[-1]
        self._ragged = isinstance(batch, MemberBatch)
        if self._ragged and not self._trained:  # every member stopped (the trainer stops at this epoch's end)
            return
        optimizer = self.optimizers()
        optimizer.zero_grad()
        if self._ragged:
            members = self._trained
            noise = None
            if self.recipe.dropout_noise:
                if self._noise is None:
                    # The global generator as the padded layout's first dropout would find it.
                    self._noise = DropoutNoiseStream(self.net, torch.get_rng_state())
                noise = self._noise.take(batch.steps, members, batch.next_steps)
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
                ids, targets = batch.segment_ids[k][None], batch.targets[k : k + 1]
                loss = self.fit_loss(pred[None], ids, targets, batch, slice(k, k + 1))[0]
                self.manual_backward(loss)
                losses.append(loss.detach())
            self._train_sse[members] += torch.stack(losses) * n_seg
        else:
            pred = self.net(batch.features)  # [K, N], dropout active
            losses = self.fit_loss(pred, batch.segment_ids, batch.targets, batch, slice(None))  # [K]
            # Sum, not mean, over members: each member's gradient is then exactly that of its own loss.
            self.manual_backward(losses.sum())
            self._train_sse += losses.detach() * n_seg
        self._train_count += n_seg
        optimizer.step()  # the per-member gradient clip runs first (on_before_optimizer_step)

    def fit_loss(
        self,
        pred: Tensor,
        segment_ids: Tensor,
        targets: Tensor,
        batch: SegmentBatch | MemberBatch,
        rows: slice,
    ) -> Tensor:
        """The training loss ``[M]`` of members ``rows`` of ``batch``: the recipe's loss object (eq. 1 on whole
        segments, or the randomized return decomposition on the batch's sampled steps), its ``loss`` term. The
        sums are taken in the networks' own dtype: under ``bf16-mixed`` the per-step predictions leave the
        matmuls in bfloat16, whose 8-bit mantissa would lose a 1000-step sum."""
        return self.loss(pred.to(self.dtype), segment_ids, targets, batch, rows)["loss"]

    def on_before_optimizer_step(self, optimizer) -> None:
        if self.recipe.grad_clip is not None:
            clip_per_member_(list(self.net.parameters()), self.recipe.grad_clip)

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if isinstance(batch, MemberBatch) and bool(self._frozen.any()):
            # A member left out still moves under AdamW (momentum, weight decay); hold it at its best weights
            # so validation and the ensemble correlation see the member the final restore will return.
            with torch.no_grad():
                for name, p in self.net.named_parameters():
                    p[self._frozen] = self.best_state[name][self._frozen]

    def on_train_epoch_end(self) -> None:
        self._log_train_loss()  # (an epoch without validation; otherwise logged with the validation's numbers)
        # The epoch's learning-rate decay: this module optimises manually, so Lightning does not step it
        # (the stacked subclass optimises automatically and leaves it to Lightning: it overrides this hook).
        if self.lr_schedulers() is not None:
            with warnings.catch_warnings():
                # A fit resumed from a snapshot ends the snapshot's epoch again before its first optimiser step
                # in this process; torch then warns of a step order that did not happen (the decay is right:
                # the resumed fit equals the uninterrupted one bit for bit).
                warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
                self.lr_schedulers().step()

    def _log_train_loss(self) -> None:
        """Log the epoch's mean training loss per trained member, once (the accumulators are emptied)."""
        if not self._train_count:
            return
        train = self._train_sse / self._train_count
        self._reset_train_acc()
        metrics = {f"{self.log_prefix}/train_loss/m{k}": train[k] for k in self._trained}
        self.log_dict({**metrics, "step": float(self.current_epoch)}, on_epoch=True, on_step=False)

    # ---- validation / early stopping ----------------------------------------------------------------
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

    def _validation_correlation(self, metric: PearsonCorrCoef | None = None) -> Tensor:
        """The epoch's Pearson correlation of the ensemble's per-step prediction with the true hidden reward
        (``metric``: the accumulator to read, ``val_corr`` by default)."""
        metric = self.val_corr if metric is None else metric
        with warnings.catch_warnings():
            # A constant side (e.g. a hidden channel that is 0 on every validation step) has no correlation:
            # torchmetrics warns and returns NaN; it is logged as 0, as before, without the warning.
            warnings.filterwarnings(
                "ignore", message="The variance of predictions or target is close to zero"
            )
            return torch.nan_to_num(metric.compute(), nan=0.0)

    def _validation_results(self) -> tuple[Tensor, Tensor] | None:
        """``(validation MSE of segment sums per network [K], ensemble correlation)`` of the epoch, or None
        when nothing was validated."""
        if not self.val_mse.update_called:
            return None
        return self.val_mse.compute().reshape(self.n_members), self._validation_correlation()

    def on_validation_epoch_end(self) -> None:
        results = None if self.trainer.sanity_checking else self._validation_results()
        if results is None:
            return
        val, corr = results
        self.epoch_seconds.append(time.perf_counter() - self._epoch_start)
        self.val_history.append(val.detach().cpu())
        self.corr_history.append(float(corr))
        epoch = self.current_epoch
        active = ~self.stopped
        improved = active & (val < self.best_val_loss)
        if bool(improved.any()):
            for name, p in self.net.named_parameters():
                self.best_state[name][improved] = p.detach()[improved]
            self.best_val_loss[improved] = val[improved]
            self.best_epoch[improved] = epoch
        self.epochs_run[active] = epoch + 1
        # Patience counts epochs since the member's best: it stops after `patience` epochs without improving.
        self.stopped |= active & (epoch - self.best_epoch >= self.config.patience)
        if bool(self.stopped.all()):
            self.trainer.should_stop = True
        # Every scalar of the epoch is logged here, before a snapshot (prism.reward.fitting.fit.FitSnapshots) can
        # be taken at the validation's end: a fit resumed from it logs from the next epoch on.
        self._log_train_loss()
        metrics = self._epoch_scalars(val, corr)
        metrics["step"] = float(epoch)  # the x-axis: epochs (Lightning logs the `step` key as the step)
        self.log_dict(metrics, on_epoch=True, on_step=False)

    def _epoch_scalars(self, val: Tensor, corr: Tensor) -> dict[str, Tensor]:
        """The epoch's validation scalars: each network's loss, the ensemble's correlation, networks active."""
        metrics = {f"{self.log_prefix}/val_loss/m{k}": val[k] for k in range(self.n_members)}
        metrics[f"{self.log_prefix}/val_corr"] = corr
        metrics[f"{self.log_prefix}/members_active"] = (~self.stopped).sum().float()
        return metrics

    def on_train_end(self) -> None:
        self._close_noise()
        self.restore_best()

    # ---- snapshots (a fit resumed mid-way: prism.reward.fitting.fit) ---------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """What Lightning's checkpoint lacks to go on as if never stopped: each member's best weights, the
        curves so far, and the random streams. Taken at an epoch's end, where the dropout stream has no draw
        in flight (an epoch's last batch asks for none ahead)."""
        checkpoint["prism_reward_fit"] = {
            "best_state": {n: t.detach().cpu().clone() for n, t in self.best_state.items()},
            "val_history": [v.clone() for v in self.val_history],
            "corr_history": list(self.corr_history),
            "epoch_seconds": list(self.epoch_seconds),
            "ragged": self._ragged,
            "noise_generator": self._noise.generator.get_state() if self._noise is not None else None,
            # The padded layout's dropout draws from the global generator (the fit runs inside fork_rng).
            "global_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = checkpoint["prism_reward_fit"]
        self.best_state = {n: t.clone() for n, t in saved["best_state"].items()}
        self.val_history = [v.clone() for v in saved["val_history"]]
        self.corr_history = list(saved["corr_history"])
        self.epoch_seconds = list(saved["epoch_seconds"])
        self._ragged = bool(saved["ragged"])
        self._close_noise()
        if saved["noise_generator"] is not None:
            self._noise = DropoutNoiseStream(self.net, saved["noise_generator"])
        torch.set_rng_state(saved["global_rng"])
        if saved["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state(saved["cuda_rng"], self.device)

    def _close_noise(self) -> None:
        if self._noise is not None:
            self._noise.close()
            self._noise = None

    def restore_best(self) -> None:
        """Load each member's best-validation weights (members never validated keep their current ones)."""
        seen = self.best_epoch >= 0
        with torch.no_grad():
            for name, p in self.net.named_parameters():
                p[seen] = self.best_state[name][seen].to(p.device)


def clip_per_member_(params: list[torch.nn.Parameter], max_norm: float, eps: float = 1e-6) -> Tensor:
    """Clip the gradient norm of each ensemble member separately (in place); returns the norms ``[K]``.

    Member k's norm is taken over slice ``[k]`` of every stacked parameter — the same rule as
    ``torch.nn.utils.clip_grad_norm_`` applied to that member alone.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(0)
    sq = torch.stack([g.pow(2).flatten(1).sum(dim=1) for g in grads]).sum(dim=0)  # [K]
    norms = sq.sqrt()
    coef = (max_norm / (norms + eps)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))
    return norms
