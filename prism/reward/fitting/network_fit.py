"""What every reward fit on segment sums shares, lone or stacked: :class:`NetworkFitModule`.

A fit trains K networks stored as the slices of stacked weights, yet each as if alone:

- AdamW acts element-wise, so one optimiser over stacked tensors is K optimisers;
- the gradient-norm clip is computed and applied per network (:func:`clip_per_member_`; a global clip would
  couple them);
- early stopping is tracked per network: each keeps a copy of its weights from its best validation epoch and
  stops counting once its patience runs out; at the end every network is restored to its own best weights.
  Training continues while any network is still improving.

How a batch is trained and validated, and what is logged per epoch, is the concrete module's: a lone fit's
:class:`~prism.reward.fitting.trajectory_sum_module.TrajectorySumModule` (its two batch layouts) or a
population's :class:`~prism.reward.fitting.stacked.StackedRewardModule` (S stores × K networks). They share
this base and none of each other's hooks.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import lightning as L
import torch
from torch import Tensor, nn
from torchmetrics import PearsonCorrCoef

from prism.reward.fitting.recipe import Optimisers


class NetworkFitModule(L.LightningModule):
    """K stacked networks fitted each as if alone: the optimiser, the per-network gradient clip, early stopping
    with each network's best weights, the epoch's timing and the fit's random state in a snapshot.

    A subclass brings the batches: ``training_step`` and ``validation_step``, and

    - :meth:`_validation_results`: the epoch's validation loss per network and its correlation scalar;
    - :meth:`_epoch_scalars`: what the epoch logs beside ``step`` (:meth:`_pooled_scalars` are the common ones);
    - :meth:`_reset_train_acc` and :meth:`_log_train_loss`: its training-loss accumulators.

    Args:
        net: the stacked networks (network index first in every parameter).
        n_members: K, the networks in ``net``.
        optimiser: ``optimiser(parameters) -> (optimiser, per-epoch scheduler or None)``.
        grad_clip: gradient-norm clip per network, or None.
        patience: epochs without improvement before a network stops (``reward.patience``).
        log_prefix: TensorBoard namespace (``reward_fit``); every scalar is logged against the epoch (the
            ``step`` key Lightning reads as the x-axis), not against optimiser steps.
    """

    def __init__(
        self,
        net: nn.Module,
        n_members: int,
        *,
        optimiser: Callable[[Iterable[nn.Parameter]], Optimisers],
        grad_clip: float | None,
        patience: int,
        log_prefix: str = "reward_fit",
    ):
        super().__init__()
        self.optimiser, self.grad_clip, self.patience = optimiser, grad_clip, patience
        self.log_prefix = log_prefix
        self.n_members = k = n_members
        self.net = net
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

    # ---- what a subclass brings ---------------------------------------------------------------------
    def _reset_train_acc(self) -> None:
        """Empty the epoch's training-loss accumulators."""
        raise NotImplementedError

    def _log_train_loss(self) -> None:
        """Log the epoch's mean training loss per trained network, once (the accumulators are emptied)."""
        raise NotImplementedError

    def _validation_results(self) -> tuple[Tensor, Tensor] | None:
        """``(validation loss per network [K], correlation scalar)`` of the epoch, or None when nothing was
        validated."""
        raise NotImplementedError

    def _epoch_scalars(self, val: Tensor, corr: Tensor) -> dict[str, Tensor]:
        """The epoch's validation scalars (logged against the epoch)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the fit holds beyond its tensors (e.g. a worker thread); called once the fit has
        returned or raised. Nothing by default."""

    # ---- training ----------------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        params = dict(self.net.named_parameters())
        self.best_state = {n: t.to(params[n]) for n, t in self.best_state.items()}  # device and dtype

    def configure_optimizers(self) -> Any:
        opt, sched = self.optimiser(self.net.parameters())
        if sched is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    def on_train_epoch_start(self) -> None:
        self._epoch_start = time.perf_counter()
        self._reset_train_acc()
        # Networks whose patience ran out (and that have best weights to return to) sit out this epoch.
        self._frozen = self.stopped & (self.best_epoch >= 0)
        self._trained = [k for k, frozen in enumerate(self._frozen.tolist()) if not frozen]

    def on_before_optimizer_step(self, optimizer) -> None:
        if self.grad_clip is not None:
            clip_per_member_(list(self.net.parameters()), self.grad_clip)

    # ---- validation / early stopping ----------------------------------------------------------------
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
        # Patience counts epochs since the network's best: it stops after `patience` epochs without improving.
        self.stopped |= active & (epoch - self.best_epoch >= self.patience)
        if bool(self.stopped.all()):
            self.trainer.should_stop = True
        # Every scalar of the epoch is logged here, before a snapshot (prism.reward.fitting.fit.FitSnapshots)
        # can be taken at the validation's end: a fit resumed from it logs from the next epoch on.
        self._log_train_loss()
        metrics = self._epoch_scalars(val, corr)
        metrics["step"] = float(epoch)  # the x-axis: epochs (Lightning logs the `step` key as the step)
        self.log_dict(metrics, on_epoch=True, on_step=False)

    def _pooled_scalars(self, val: Tensor, corr: Tensor, networks: Iterable[int]) -> dict[str, Tensor]:
        """The listed networks' validation losses, the correlation and the networks still training."""
        metrics = {f"{self.log_prefix}/val_loss/m{k}": val[k] for k in networks}
        metrics[f"{self.log_prefix}/val_corr"] = corr
        metrics[f"{self.log_prefix}/members_active"] = (~self.stopped).sum().float()
        return metrics

    def on_train_end(self) -> None:
        self.restore_best()

    def restore_best(self) -> None:
        """Load each network's best-validation weights (networks never validated keep their current ones)."""
        seen = self.best_epoch >= 0
        with torch.no_grad():
            for name, p in self.net.named_parameters():
                p[seen] = self.best_state[name][seen].to(p.device)

    # ---- snapshots (a fit resumed mid-way: prism.reward.fitting.fit) ------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """What Lightning's checkpoint lacks to go on as if never stopped: each network's best weights, the
        curves so far, and the global random streams (the fit runs inside ``fork_rng``)."""
        checkpoint["prism_reward_fit"] = {
            "best_state": {n: t.detach().cpu().clone() for n, t in self.best_state.items()},
            "val_history": [v.clone() for v in self.val_history],
            "corr_history": list(self.corr_history),
            "epoch_seconds": list(self.epoch_seconds),
            "global_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = checkpoint["prism_reward_fit"]
        self.best_state = {n: t.clone() for n, t in saved["best_state"].items()}
        self.val_history = [v.clone() for v in saved["val_history"]]
        self.corr_history = list(saved["corr_history"])
        self.epoch_seconds = list(saved["epoch_seconds"])
        torch.set_rng_state(saved["global_rng"])
        if saved["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state(saved["cuda_rng"], self.device)


def validation_correlation(metric: PearsonCorrCoef) -> Tensor:
    """The epoch's Pearson correlation accumulated in ``metric`` (an ensemble's per-step prediction against the
    true hidden reward), 0 where a side is constant."""
    with warnings.catch_warnings():
        # A constant side (e.g. a hidden channel that is 0 on every validation step) has no correlation:
        # torchmetrics warns and returns NaN; it is logged as 0, without the warning.
        warnings.filterwarnings("ignore", message="The variance of predictions or target is close to zero")
        return torch.nan_to_num(metric.compute(), nan=0.0)


def clip_per_member_(params: list[torch.nn.Parameter], max_norm: float, eps: float = 1e-6) -> Tensor:
    """Clip the gradient norm of each network separately (in place); returns the norms ``[K]``.

    Network k's norm is taken over slice ``[k]`` of every stacked parameter — the same rule as
    ``torch.nn.utils.clip_grad_norm_`` applied to that network alone.
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


__all__ = ["NetworkFitModule", "clip_per_member_", "validation_correlation"]
