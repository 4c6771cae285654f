"""A population's reward fits as one stacked fit: S stores × K members in one ensemble, one Trainer.

A population of S members refits S ensembles of K networks each (one per member's segment store). Fitted one
after the other, each is a small launch-bound job on a GPU; here the S·K networks are the slices of one stacked
network that the model's :class:`~prism.reward.fitting.recipe.FitRecipe` builds, trained in one pass, yet member
s's K networks are fitted exactly as the model's lone fit fits them with the padded layout (ReSymNet's:
:func:`~prism.reward.models.resymnet_fit.fit_resymnet_population` drives this with its recipe). The recipe
brings the network, the stacked optimiser, the clip and the fitted model; this module names no model:

- store s keeps its own data module (split, scaler, shuffle orders from its fit seed), its own initial
  weights and its own dropout stream (a generator seeded like the global one a lone fit seeds);
- a stacked batch is batch i of every store, each padded to the longest; a store whose epoch has fewer
  batches sits out the rest of the epoch: its losses are masked and :class:`MemberAdamW` leaves its slices
  (weights, moments, step counts) exactly as they were — what a lone fit does by not taking that step;
- losses are each member's mean over its own real segments, summed (so each gradient is its own); the
  gradient clip, early stopping and best-weight restore are per network (:class:`TrajectorySumModule`).

Each store's curves (per-epoch losses, its ensemble's correlation, its networks still training, then its
summary) are logged as its lone fit logs them, to a logger of its own (``loggers=``,
:class:`~prism.reward.fitting.fit_loggers.StoreRoutedLogger`), and end where its lone fit would have ended.

``tests/test_stacked_reward_fit.py`` checks the equality in float64 on the CPU. On CUDA the dropout masks come
from per-store CUDA generators (the same distribution; a lone CUDA fit's fused dropout draws differently).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger
from torch import Tensor
from torchmetrics import PearsonCorrCoef

from prism.data.datamodule import TrajectorySumDataModule
from prism.data.segments import SegmentStore
from prism.reward.config import ReSymNetConfig
from prism.reward.fitting.fit import (
    check_precision,
    ensemble_seeds,
    fit_callbacks,
    run_fit_trainer,
    summarise_fit,
)
from prism.reward.fitting.fit_loggers import StoreRoutedLogger, log_fit_summary
from prism.reward.fitting.fitter import FittedReward
from prism.reward.fitting.member_adamw import MemberAdamW
from prism.reward.fitting.network_fit import NetworkFitModule, validation_correlation
from prism.reward.fitting.recipe import FitRecipe
from prism.reward.fitting.stacked_data import StackedBatch, StackedSegmentData, stack_batches, stacked_data
from prism.reward.losses import segment_sums
from prism.reward.model import RewardModel


class StackedRewardModule(NetworkFitModule):
    """S stores × K networks fitted together, each store's as its lone padded fit (see the module docstring);
    early stopping, the clip and the best-weight restore are per network (:class:`NetworkFitModule`).

    Args:
        in_features: width of ``h_t``.
        config: the reward model's keys (early stopping's ``patience``).
        store_seeds: the fit seed of each store (its networks' init seeds and dropout stream derive from it).
        recipe: the model's fit (its network, stacked optimiser, clip and fitted model; K = ``n_members``).
    """

    def __init__(
        self, in_features: int, config: ReSymNetConfig, store_seeds: Sequence[int], recipe: FitRecipe
    ):
        if recipe.stacked_optimiser is None:
            raise ValueError("recipe: the reward model's FitRecipe has no stacked_optimiser (no stacked fit)")
        k = recipe.n_members
        seeds = [m for s in store_seeds for m in ensemble_seeds(s, k)]
        super().__init__(
            recipe.network(in_features, seeds),
            len(seeds),
            # (a store without a batch left this epoch takes no step)
            optimiser=recipe.stacked_optimiser(len(seeds)),
            grad_clip=recipe.grad_clip,
            patience=config.patience,
        )
        self.recipe, self.in_features, self.member_seeds = recipe, in_features, seeds
        self.store_seeds, self.k, self.stores = [int(s) for s in store_seeds], k, len(store_seeds)
        self._reset_train_acc()
        self._noise_generators: list[torch.Generator] = []
        self._resumed_noise: list[Tensor] | None = None  # the stores' dropout streams in a snapshot
        # Each store's ensemble correlation, as its lone fit computes it (its curves: StoreRoutedLogger).
        self.store_corr = torch.nn.ModuleList(PearsonCorrCoef() for _ in store_seeds)
        self._store_corr_values: Tensor | None = None
        self._running = list(range(self.stores))  # stores whose lone fit would still run this epoch

    def on_train_epoch_start(self) -> None:
        super().on_train_epoch_start()
        # A lone fit ends once its every network has stopped: its curves end there, so store s's scalars are
        # logged only while one of its networks still trains (the stacked fit goes on for the others).
        done = self.stopped.view(self.stores, self.k).all(dim=1).tolist()
        self._running = [s for s in range(self.stores) if not done[s]]

    def _reset_train_acc(self) -> None:
        self._train_sse = torch.zeros(self.n_members, device=self.device, dtype=self.dtype)
        # Each network's real training segments this epoch (a store's batches differ in size and number).
        self._train_segments = torch.zeros(self.n_members, device=self.device, dtype=self.dtype)
        self._train_count = 0  # batches this epoch

    def on_fit_start(self) -> None:
        super().on_fit_start()
        # The stream a lone fit draws its dropout from: the global generator right after manual_seed(seed).
        self._noise_generators = [torch.Generator(self.device).manual_seed(s) for s in self.store_seeds]
        if self._resumed_noise is not None:  # a fit resumed from a snapshot: its streams go on from there
            for generator, state in zip(self._noise_generators, self._resumed_noise, strict=True):
                generator.set_state(state)
            self._resumed_noise = None

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["prism_reward_fit"]["store_noise"] = [g.get_state() for g in self._noise_generators]

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        # Lightning loads the snapshot before on_fit_start makes the generators: set them there.
        self._resumed_noise = list(checkpoint["prism_reward_fit"]["store_noise"])

    def _dropout_noise(self, store_steps: list[int], n: int) -> list[Tensor] | None:
        """Per residual block ``[S·K, N, H]``: store s's rows drawn as its lone padded forward draws them."""
        net = self.net
        if not (net.training and net.dropout > 0):
            return None
        keep, dtype = 1.0 - net.dropout, net.ln_in.weight.dtype
        noise = [
            torch.zeros(self.stores, self.k, n, net.hidden, dtype=dtype, device=self.device)
            for _ in net.blocks
        ]
        for s, ns in enumerate(store_steps):
            if ns == 0:
                continue  # no batch for this store: no forward, no draw
            for block in noise:  # block order, as F.dropout meets them
                mask = torch.empty(self.k, ns, net.hidden, dtype=torch.bool, device=self.device)
                block[s, :, :ns] = (
                    mask.bernoulli_(keep, generator=self._noise_generators[s]).to(dtype).div_(keep)
                )
        return [b.view(self.stores * self.k, n, net.hidden) for b in noise]

    def _member_losses(self, pred: Tensor, batch: StackedBatch) -> tuple[Tensor, Tensor]:
        """Per network: ``(mean over its real segments of (Σ r̂ − R)², Σ of the same)`` (eq. 1)."""
        sums = segment_sums(pred, batch.segment_ids, batch.targets.shape[-1])
        sse = ((sums - batch.targets).square() * batch.segment_mask).sum(dim=-1)
        return sse / batch.segment_mask.sum(dim=-1).clamp_min(1), sse

    def training_step(self, batch: StackedBatch, batch_idx: int) -> Tensor:
        steps = batch.store_steps
        pred = self.net(batch.features, noise=self._dropout_noise(steps, batch.features.shape[1]))
        losses, sse = self._member_losses(pred, batch)
        # A store with no batch left this epoch takes no optimiser step (host ints: no device read).
        self.trainer.optimizers[0].active = [n > 0 for n in steps for _ in range(self.k)]
        # The epoch's training loss per network (a lone fit's curve): summed errors over real segments.
        self._train_sse += sse.detach()
        self._train_segments += batch.segment_mask.sum(dim=-1)
        self._train_count += 1  # batches (host int): whether anything was trained this epoch
        return losses.sum()  # the inactive networks' terms are exact zeros (no segments)

    def on_train_epoch_end(self) -> None:
        # (an epoch without validation; Lightning steps the learning-rate decay itself: automatic optimisation)
        self._log_train_loss()

    def _log_train_loss(self) -> None:
        """Each trained network's mean training loss over the epoch's real segments, for running stores."""
        if not self._train_count:
            return
        train = self._train_sse / self._train_segments.clamp_min(1)
        self._reset_train_acc()
        running = set(self._running)
        trained = [j for j in self._trained if j // self.k in running]
        metrics = {f"{self.log_prefix}/train_loss/m{j}": train[j] for j in trained}
        self.log_dict({**metrics, "step": float(self.current_epoch)}, on_epoch=True, on_step=False)

    def on_validation_epoch_start(self) -> None:
        self._val_sse = torch.zeros(self.n_members, device=self.device, dtype=self.dtype)
        self._val_seen = False
        for metric in self.store_corr:
            metric.reset()
            metric.set_dtype(self.dtype)

    def validation_step(self, batch: StackedBatch, batch_idx: int) -> None:
        pred = self.net(batch.features, dropout=False)
        _, sse = self._member_losses(pred, batch)
        self._val_sse += sse  # padded segments are masked out (a store's own segments only)
        for s, ns in enumerate(batch.store_steps):
            if ns:
                k = self.k
                self.store_corr[s].update(
                    pred[s * k : (s + 1) * k, :ns].mean(dim=0), batch.true_sparse[s * k, :ns]
                )
        self._val_seen = True

    def _validation_results(self) -> tuple[Tensor, Tensor] | None:
        """Per network its validation loss; the stores' mean ensemble correlation (each store's own is
        logged as ``val_corr/s<s>``, see :meth:`_epoch_scalars`)."""
        if not self._val_seen:
            return None
        counts = self.trainer.datamodule.val_counts.to(self._val_sse)
        zero = self._val_sse.new_zeros(())
        self._store_corr_values = torch.stack(
            [validation_correlation(m) if m.update_called else zero for m in self.store_corr]
        )
        # A lone fit divides its summed squared errors by its own validation segments: the same here.
        return self._val_sse / counts.repeat_interleave(self.k), self._store_corr_values.mean()

    def _epoch_scalars(self, val: Tensor, corr: Tensor) -> dict[str, Tensor]:
        """The population-wide scalars (the progress bar's: the running stores' networks, the stores' mean
        correlation, networks active) and each running store's own: its ensemble correlation and its networks
        still training, as ``…/s<s>`` (:class:`~prism.reward.fitting.fit_loggers.StoreRoutedLogger` hands
        them to the store's logger under the lone fit's names)."""
        networks = (s * self.k + k for s in self._running for k in range(self.k))
        metrics = self._pooled_scalars(val, corr, networks)
        active = (~self.stopped).view(self.stores, self.k).sum(dim=1).to(val.dtype)
        for s in self._running:
            metrics[f"{self.log_prefix}/val_corr/s{s}"] = self._store_corr_values[s]
            metrics[f"{self.log_prefix}/members_active/s{s}"] = active[s]
        return metrics

    def ensembles(
        self, dms: Sequence[TrajectorySumDataModule], device: str | torch.device = "cpu"
    ) -> list[RewardModel]:
        """Store s's K networks as its lone fit's model (the recipe's, eval mode, its scaler) on ``device``:
        a K-network copy from the recipe, loaded with the store's slices (every parameter has the network
        index first)."""
        out = []
        state = {n: p.detach() for n, p in self.net.named_parameters()}
        dtype = next(iter(state.values())).dtype
        for s, dm in enumerate(dms):
            lo, hi = s * self.k, (s + 1) * self.k
            net = self.recipe.network(self.in_features, self.member_seeds[lo:hi])
            net = net.to(device=device, dtype=dtype)
            net.load_state_dict({n: t[lo:hi] for n, t in state.items()})
            out.append(self.recipe.model(net, dm).to(device=device, dtype=dtype).eval())
        return out


def fit_reward_models_stacked(
    stores: Sequence[SegmentStore],
    config: ReSymNetConfig,
    seeds: Sequence[int],
    recipe: FitRecipe,
    *,
    device: str | torch.device = "cpu",
    loggers: Sequence[Logger] | None = None,
    callbacks: Sequence[Callback] = (),
    on_snapshot: Callable[[bytes], None] | None = None,
    snapshot_every_s: float = 600.0,
    resume: bytes | None = None,
) -> list[FittedReward]:
    """Fit one ensemble per store (store s with fit seed ``seeds[s]``) in one stacked fit of ``recipe``'s
    networks on ``device``; returns them as the model's lone fit would, one after the other, with the padded
    layout.

    ``loggers``: store s's curves and summary go to ``loggers[s]`` under the names a lone fit logs (per-epoch
    train and validation loss per network, the store's ensemble correlation, networks active; at the end its
    summary), through a :class:`~prism.reward.fitting.fit_loggers.StoreRoutedLogger`. ``callbacks`` (e.g. a run's
    progress bar over epochs), ``on_snapshot``, ``snapshot_every_s`` and ``resume`` as for
    the lone fit (:func:`~prism.reward.fitting.fit.fit_trajectory_sums`): one snapshot holds every store's fit (weights, per-network AdamW step counts,
    early stopping, shuffle and dropout streams), and a fit resumed from it returns what the uninterrupted fit
    would have."""
    config.validate()
    check_precision(config.precision, device)
    if loggers is not None and len(loggers) != len(stores):
        raise ValueError(f"loggers: one per store, got {len(loggers)} for {len(stores)} stores")
    device = torch.device(device)
    start = time.perf_counter()
    data = stacked_data(stores, config, seeds)
    logger = StoreRoutedLogger(loggers, config.ensemble_size) if loggers else False
    callbacks, clock, carried_s = fit_callbacks(callbacks, on_snapshot, snapshot_every_s, resume)
    module = StackedRewardModule(data.dms[0].in_features, config, seeds, recipe)
    # (no global seed: each store's dropout stream is a generator of its own, seeded in on_fit_start)
    run_fit_trainer(module, data, config, device, logger, callbacks, resume)
    # The models are handed over on the CPU, as a lone fit hands its model over; each store's
    # summary scores its own validation split once (prism.reward.fitting.fit.summarise_fit).
    models = [model.cpu() for model in module.ensembles(data.dms, device=device)]
    elapsed = carried_s + time.perf_counter() - start  # the stacked fit's, shared by its stores
    fitted = []
    for s, (model, store, dm) in enumerate(zip(models, stores, data.dms)):
        networks = slice(s * module.k, (s + 1) * module.k)
        summary = summarise_fit(model, store, dm, module, networks, wall_time_s=elapsed, clock=clock)
        if loggers:
            log_fit_summary(loggers[s], summary)
        fitted.append(FittedReward(model, summary))
    return fitted


__all__ = [
    "MemberAdamW",
    "StackedBatch",
    "StackedRewardModule",
    "StackedSegmentData",
    "fit_reward_models_stacked",
    "stack_batches",
    "stacked_data",
]
