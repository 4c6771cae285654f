"""The shared driver of a reward fit on segment sums (docs/method.md §4): :func:`fit_trajectory_sums` fits what a
model's :class:`~prism.reward.fitting.recipe.FitRecipe` describes (ReSymNet's
:mod:`prism.reward.models.resymnet_fit`, RRD's :mod:`prism.reward.models.rrd`) with a Lightning ``Trainer`` over
a :class:`~prism.reward.fitting.trajectory_sum_module.TrajectorySumModule`, and returns the fitted model with its
:class:`~prism.reward.fitting.fitter.FitSummary`.

What a lone and a population's stacked fit (:mod:`prism.reward.fitting.stacked`) share lives here too: the
Trainer and its run (:func:`run_fit_trainer`: threads, forked random state, resume), precision checks, the
networks' seeds, snapshots (:class:`FitSnapshots`) and the summary (:func:`summarise_fit`).
"""

from __future__ import annotations

import contextlib
import io
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TypedDict

import fsspec  # (lightning's own dependency: it reads checkpoint paths through fsspec)
import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger

from prism.core import interrupt
from prism.core._warnings import quiet_lightning
from prism.data.datamodule import TrajectorySumDataModule, member_shuffle_seeds
from prism.data.segments import SegmentStore
from prism.reward.config import RewardConfig
from prism.reward.fitting.fit_loggers import log_fit_summary
from prism.reward.fitting.fit_timer import FitClock
from prism.reward.fitting.fitter import FitSummary, FittedReward, NetworkRewardModel
from prism.reward.fitting.network_fit import NetworkFitModule
from prism.reward.fitting.recipe import FitRecipe
from prism.reward.fitting.trajectory_sum_module import TrajectorySumModule
from prism.reward.quality import score_validation


def ensemble_seeds(seed: int, n_members: int) -> list[int]:
    """Initialisation seed of each network of a fit (ReSymNet's ensemble members), derived from the fit seed
    (not a population's member seeds: :func:`prism.config.schema.member_seeds`)."""
    return [int(seed) * 1_000_003 + 7 * (k + 1) for k in range(n_members)]


def bf16_supported(device: str | torch.device) -> bool:
    """Whether ``device`` computes bfloat16 matmuls natively: a CUDA GPU that says so, or a CPU with
    AVX512-BF16 or AMX (oneDNN's check; elsewhere torch emulates bf16, slower than float32)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type != "cpu":
        return False
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def check_precision(precision: str, device: str | torch.device) -> None:
    """Raise ``ValueError`` (one line naming ``reward.precision``) when ``precision`` needs bf16 that
    ``device`` lacks."""
    if precision == "bf16-mixed" and not bf16_supported(device):
        kind = (
            "this CPU (no AVX512-BF16 or AMX)" if torch.device(device).type == "cpu" else f"device {device}"
        )
        raise ValueError(
            f"reward.precision: bf16-mixed needs native bfloat16, which {kind} lacks; use 32-true"
        )


def fit_threads(config: RewardConfig) -> int:
    """Torch CPU threads for a fit: ``config.threads``, or (0) the caller's current count."""
    return config.threads if config.threads > 0 else torch.get_num_threads()


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)``, then restore the caller's count."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fit_trainer(
    device: torch.device,
    config: RewardConfig,
    logger: Logger | bool | None,
    callbacks: Sequence[Callback],
) -> L.Trainer:
    """The Trainer of a reward fit (lone or stacked): ``config.max_epochs`` on ``device`` at
    ``config.precision``, no checkpoints, no progress bar or model summary, no sanity validation; every
    scalar is logged per epoch (the modules log against the epoch)."""
    return L.Trainer(
        accelerator="gpu" if device.type == "cuda" else device.type,
        devices=[device.index or 0] if device.type == "cuda" else 1,
        max_epochs=config.max_epochs,
        precision=config.precision,
        logger=logger if logger is not None else False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=config.val_every,  # (reward.val_every: early stopping on validated epochs)
        log_every_n_steps=1,
        callbacks=list(callbacks),
    )


def summarise_fit(
    model: torch.nn.Module,
    store: SegmentStore,
    dm: TrajectorySumDataModule,
    module: NetworkFitModule,
    networks: slice,
    *,
    wall_time_s: float,
    clock: FitClock | None = None,
) -> FitSummary:
    """The :class:`FitSummary` of a fitted ``model`` (on the CPU) whose networks are ``module``'s ``networks``
    (all of a lone fit's; one store's slice of a stacked fit's): the validation split of ``dm`` scored once.
    ``clock``: the fit's CPU clock, read after the scoring (its total includes it)."""
    validation, expert = score_validation(model, store, dm.val_segments)
    cpu = clock.read() if clock is not None else None
    epoch_seconds = module.epoch_seconds
    return FitSummary(
        epochs_run=module.epochs_run[networks].tolist(),
        best_epoch=module.best_epoch[networks].tolist(),
        best_val_loss=module.best_val_loss[networks].tolist(),
        wall_time_s=wall_time_s,
        seconds_per_epoch=float(torch.tensor(epoch_seconds).median()) if epoch_seconds else 0.0,
        n_train_segments=int(dm.train_segments.shape[0]),
        n_val_segments=int(dm.val_segments.shape[0]),
        validation=validation,
        validation_expert=expert,
        val_segments=dm.val_segments.clone(),
        cpu_time_s=None if cpu is None else cpu[0],
        train_cpu_s=None if cpu is None else cpu[1],
        validation_cpu_s=None if cpu is None else cpu[2],
    )


def run_fit_trainer(
    module: NetworkFitModule,
    datamodule: L.LightningDataModule,
    config: RewardConfig,
    device: torch.device,
    logger: Logger | bool | None,
    callbacks: Sequence[Callback],
    resume: bytes | None,
    *,
    seed: int | None = None,
) -> None:
    """Fit ``module`` on ``datamodule`` with a Trainer of its own (:func:`fit_trainer`), for a lone and a
    stacked fit alike: Lightning kept quiet, ``config.threads`` CPU threads, and torch's global generator
    forked (seeded with ``seed`` when given: the padded layout's dropout masks come from it) so that a refit
    in the middle of an RL run leaves the caller's stream as it was; from the snapshot ``resume`` when given."""
    # Lightning resumes from a path (read through fsspec): the snapshot's bytes go to fsspec's in-memory file
    # system, not to a temporary file that a killed process would leave behind.
    ckpt_path = None if resume is None else in_memory_file(resume)
    with quiet_lightning(), torch.random.fork_rng(devices=[]), _torch_threads(fit_threads(config)):
        if seed is not None:
            torch.manual_seed(seed)
        trainer = fit_trainer(device, config, logger, callbacks)
        try:
            interrupt.fit(trainer, module, datamodule=datamodule, ckpt_path=ckpt_path)
        finally:
            module.close()  # (a worker thread, should the fit stop on an exception)
            if ckpt_path is not None:
                fsspec.filesystem("memory").rm(ckpt_path)


class FitSnapshots(Callback):
    """Hands ``on_snapshot`` the fit's state at the end of an epoch once ``every_s`` seconds have passed since
    the fit (or the last snapshot) began (0: every epoch), never at the last epoch (the fit is about to
    return). A snapshot is bytes: Lightning's checkpoint of the fit (weights, optimiser and scheduler, loop
    progress, the data module's shuffle streams) with :class:`TrajectorySumModule`'s own state, plus the fit's
    wall seconds so far; :func:`fit_trajectory_sums` ``resume=`` goes on from it."""

    def __init__(
        self,
        on_snapshot: Callable[[bytes], None],
        every_s: float,
        carried_s: float = 0.0,
        clock: FitClock | None = None,
    ):
        self.on_snapshot = on_snapshot
        self.every_s = float(every_s)
        self.carried_s = carried_s
        self.clock = clock
        self._start = self._last = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        now = time.perf_counter()
        last_epoch = trainer.current_epoch + 1 >= (trainer.max_epochs or 0)
        if trainer.sanity_checking or trainer.should_stop or last_epoch or now - self._last < self.every_s:
            return
        for logger in trainer.loggers:  # the curves so far reach the disk with the snapshot (a resume
            logger.save()  # logs on from the epoch after it; a kill must not lose what came before)
        checkpoint = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
        checkpoint["prism_fit_wall_s"] = self.carried_s + now - self._start
        if self.clock is not None:
            checkpoint["prism_fit_cpu_s"] = self.clock.read()[0]
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        self.on_snapshot(buffer.getvalue())
        self._last = time.perf_counter()


def fit_callbacks(
    callbacks: Sequence[Callback],
    on_snapshot: Callable[[bytes], None] | None,
    snapshot_every_s: float,
    resume: bytes | None,
) -> tuple[list[Callback], FitClock, float]:
    """A fit's Trainer callbacks, lone or stacked: the caller's, its CPU clock's timer and (with
    ``on_snapshot``) :class:`FitSnapshots`; with the clock and the wall seconds carried over from ``resume``
    (a resumed fit's times add on)."""
    carried_s = snapshot_wall_s(resume)
    clock = FitClock(resume)
    out = [*callbacks, clock.timer]
    if on_snapshot is not None:
        out.append(FitSnapshots(on_snapshot, snapshot_every_s, carried_s, clock))
    return out, clock, carried_s


def snapshot_wall_s(snapshot: bytes | None) -> float:
    """The fit's wall seconds before ``snapshot`` was taken (0 without one): a resumed fit's time adds on."""
    if snapshot is None:
        return 0.0
    return float(torch.load(io.BytesIO(snapshot), weights_only=False)["prism_fit_wall_s"])


def snapshot_epoch(snapshot: bytes) -> int:
    """The (0-based) epoch at whose end ``snapshot`` was taken."""
    return int(torch.load(io.BytesIO(snapshot), weights_only=False)["epoch"])


def in_memory_file(data: bytes) -> str:
    """``data`` as a file of fsspec's in-memory file system; returns its ``memory://`` path."""
    path = f"memory://prism-fit/{uuid.uuid4().hex}.ckpt"
    with fsspec.open(path, "wb") as file:
        file.write(data)
    return path


class FitOptions(TypedDict, total=False):
    """The keyword options of :func:`fit_trajectory_sums` that a model's fit
    (:func:`prism.reward.models.resymnet_fit.fit_resymnet_model`, :func:`prism.reward.models.rrd.fit_rrd_model`)
    passes on unchanged."""

    log_prefix: str
    device: str | torch.device
    layout: str
    callbacks: Sequence[Callback]
    on_snapshot: Callable[[bytes], None] | None
    snapshot_every_s: float
    resume: bytes | None
    init: NetworkRewardModel | None


def fit_trajectory_sums(
    store: SegmentStore,
    config: RewardConfig,
    recipe: FitRecipe,
    logger: Logger | None = None,
    seed: int = 0,
    *,
    log_prefix: str = "reward_fit",
    device: str | torch.device = "cpu",
    layout: str = "auto",
    callbacks: Sequence[Callback] = (),
    on_snapshot: Callable[[bytes], None] | None = None,
    snapshot_every_s: float = 600.0,
    resume: bytes | None = None,
    init: NetworkRewardModel | None = None,
) -> FittedReward:
    """Fit a fresh reward model (``recipe``) on every segment in ``store`` and return it (on CPU, eval mode).

    Runs its own Lightning ``Trainer`` (no checkpoints, no progress bar) on a :class:`TrajectorySumDataModule`
    with the seeded 80/20 split; deterministic given ``seed`` (and the thread count, ``config.threads``). The
    returned model (``recipe.model``; ReSymNet's ``ReSymNetRewardModel``) holds the training-split scaler as
    buffers, every member at its best validation epoch; it comes with its :class:`FitSummary` (a
    :class:`~prism.reward.fitting.fitter.FittedReward`, ``model, summary = fit_trajectory_sums(...)``). Metrics
    go to ``logger`` under ``{log_prefix}/`` (train/val loss per member, validation correlation, epochs run), all against the epoch;
    give each fit a logger of its own (the run gives cycle c's fit ``tb/reward_fit/cycle<c>/version_<n>``).

    Args:
        device: where the fit runs (``cpu``, ``cuda``, ``cuda:1`` or a ``torch.device``); the run passes its own.
        layout: training-batch layout, ``ragged`` or ``padded`` (:mod:`~prism.reward.fitting.trajectory_sum_module`;
            same maths);
            ``auto`` = ragged on a CPU, padded on a GPU. ``padded`` is the reference the benchmark and the
            equivalence tests compare against.
        callbacks: Lightning callbacks for the fit's Trainer (e.g. a run's progress bar over epochs); they
            must not draw random numbers.
        on_snapshot: called with a snapshot of the fit (bytes, :class:`FitSnapshots`) at the end of an epoch
            every ``snapshot_every_s`` seconds (0: every epoch); a run stores it in its checkpoint, so a fit of
            hours killed half-way does not start again from epoch 0.
        resume: a snapshot of this fit (same store, config, seed, device and layout): the fit goes on from
            the epoch after it and returns what the uninterrupted fit would have (bit for bit on a CPU).
        init: a fitted ensemble of the same shape to start from instead of a fresh initialisation
            (``reward.warm_start``: a refit from the previous cycle's members); the optimiser, schedule and
            early stopping start afresh, and the scaler is fitted on this store as always.
    """
    config.validate()
    check_precision(config.precision, device)
    if layout not in ("auto", "ragged", "padded"):
        raise ValueError(f"fit_trajectory_sums: layout must be auto, ragged or padded, got {layout!r}")
    device = torch.device(device)
    if layout == "auto":
        layout = "ragged" if device.type == "cpu" else "padded"
    start = time.perf_counter()
    k = recipe.n_members
    dm = TrajectorySumDataModule(
        store,
        batch_size=recipe.batch_size,
        val_fraction=config.val_fraction,
        seed=seed,
        n_members=k,
        shuffle_seeds=member_shuffle_seeds(seed, k),
        use_dense_features=recipe.inputs.dense,
        ragged=layout == "ragged",
        sampler=recipe.loss.sampler,
        next_obs=recipe.inputs.next_obs,
        standardise=recipe.standardise,
        terminal=recipe.inputs.terminal,
    )
    if recipe.inputs.dense and not dm.use_dense_features:
        raise ValueError(
            "fit_trajectory_sums: the recipe reads dense rewards but the store holds no dense-reward columns"
        )
    dm.setup("fit")
    callbacks, clock, carried_s = fit_callbacks(callbacks, on_snapshot, snapshot_every_s, resume)
    module = TrajectorySumModule(recipe, dm.in_features, config, ensemble_seeds(seed, k), log_prefix)
    if init is not None:
        module.start_from(init.net)
    run_fit_trainer(module, dm, config, device, logger, callbacks, resume, seed=seed)
    model = recipe.model(module.net.cpu(), dm)
    model.eval()
    summary = summarise_fit(
        model,
        store,
        dm,
        module,
        slice(None),
        wall_time_s=carried_s + time.perf_counter() - start,
        clock=clock,
    )
    if logger is not None:
        log_fit_summary(logger, summary, log_prefix)
    return FittedReward(model, summary)
