"""Typed configuration of the reward package (``reward:`` in a run config), one dataclass per reward model.

As ``agent:`` is typed by the chosen backbone's dataclass, ``reward:`` is typed by the dataclass of the model
``reward.name`` selects (registered with the model, :func:`prism.plugins.registry.register_reward_model` ``config=``):

- :class:`RewardConfig`, the keys every method shares: ``name`` and ``relabel``, and the fit's own keys
  (epochs, patience, validation, the loss and its sampling, precision, threads, warm start) that any learned
  model is fitted with. The methods without a model (``none``, ``uniform``, ``random``) take it as it is;
- :class:`ReSymNetConfig`, ReSymNet's network and optimiser on top (flat keys: ``reward.ensemble_size``,
  ``reward.hidden``, ``reward.lr``, ...);
- :class:`RRDRewardConfig`, RRD's on top, under ``reward.rrd`` (:class:`RRDConfig`).

A key the chosen model does not have is refused, naming the model that has it (the loader,
:mod:`prism.config.reward_keys`); in a config file it is skipped with a one-line warning instead, so an env
file composes with every method overlay. Each model's defaults live with its class (e.g.
:attr:`RewardConfig.default_bias_correction`), never in a branch on ``name``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from prism.core import checks

if TYPE_CHECKING:
    from prism.reward.losses import FitLoss

FIT_LOSSES = ("sum", "normalised", "randomized")
"""``reward.loss``: eq. 1 over whole segments, eq. 1 with each segment's error divided by its length, or
randomized return decomposition over sampled steps."""
FIT_LOSS_SUMMARIES = {
    "sum": "eq. 1: each segment's per-step predictions summed against its return (the paper's; the default)",
    "normalised": "eq. 1 with each segment's squared error divided by its length, so long segments do not "
    "dominate the fit (docs/method.md §4c)",
    "randomized": "randomized return decomposition: reward.sampled_steps sampled steps of each segment, scaled "
    "to its length (cheaper fits on long episodes; docs/benchmarks.md)",
}
"""One line per ``reward.loss`` value, for ``prism list`` and the reward fit's progress line."""
FIT_SAMPLINGS = ("uniform", "stratified")
"""``reward.sampling``: how the randomized loss draws its K steps of a segment."""
FIT_PRECISIONS = ("32-true", "bf16-mixed")
"""``reward.precision``: the fit Trainer's precision (Lightning's names)."""


@dataclass
class RewardConfig:
    """How the sparse channel is redistributed and how a learned reward model is fitted (docs/method.md §4–5):
    the keys shared by every reward method (a model's own keys are in its subclass)."""

    default_bias_correction: ClassVar[bool] = True
    """``reward.bias_correction: null`` resolved for this model (on: eq. 1's unbiased estimate)."""

    name: str = "none"
    """Redistribution of the sparse channel, a name registered in :mod:`prism.plugins`: ``resymnet``
    (learned per-step prediction), ``rrd`` (randomized return decomposition's learned ``r̂(s, a, s')``, its own
    keys under ``reward.rrd``), ``uniform`` (R/T), ``random`` (R·α_t/Σα, α_t ~ U(−1, 1)), ``none`` (the
    channel as emitted: the baseline); or a class path ``package.module:Name`` of a user shaper (one with
    ``needs_model = True`` gets a fitted reward model; see :mod:`prism.plugins.registry`)."""
    max_epochs: int = 1000
    """Upper bound on training epochs."""
    patience: int = 20
    """Epochs without a validation improvement before a member stops (its best weights are restored)."""
    val_every: int = 1
    """Validate every ``val_every``-th epoch (0-based epochs ``val_every − 1``, ``2·val_every − 1``, …) instead
    of every epoch: a validation pass runs the model over every step of the whole validation split, so on
    long episodes with the randomized loss it costs more than the sampled training epoch (docs/benchmarks.md).
    Early stopping stays on whole validation segments: a member's best epoch is the best *validated* epoch,
    those are the weights restored, ``patience`` still counts epochs (a member stops at the first validation
    ``patience`` or more epochs after its best), and the fit's reported validation scores the restored model
    on the whole split. 1 (the paper's) by default."""
    val_fraction: float = 0.2
    """Fraction of segments held out for validation (split by segment, seeded)."""
    threads: int = 0
    """CPU threads torch uses during a fit (restored afterwards); 0 = the caller's count (in a run, the run's
    ``threads``). More threads pay only on an otherwise idle machine: OpenMP threads that share cores with
    other jobs stall each other (docs/benchmarks.md)."""
    stacked_fit: bool = False
    """Population runs: fit every member's model in one stacked S × K fit (one Trainer on the run's device,
    padded layout; prism/reward/fitting/stacked.py) instead of one fit per member, for a model registered with a
    population fit (ReSymNet's). Each member's model is the one its own padded-layout fit would give (on a CPU
    the per-member fits take the ragged layout: equal up to float rounding). Meant for a GPU, where the
    per-member fits are launch-bound; off keeps the per-member fits."""
    loss: str = "sum"
    """The fit's training loss: ``sum``, the paper's trajectory-sum regression (eq. 1) over every step of each
    segment; ``normalised``, eq. 1 with each segment's squared error divided by its length T (every segment
    weighs alike; validation and early stopping stay on eq. 1's whole-segment MSE; docs/method.md §4c); or
    ``randomized``, randomized return decomposition (RRD, Ren et al., ICLR 2022): each training
    batch samples ``sampled_steps`` steps of every segment, without replacement, and regresses the segment's
    sum on ``(T/K)·Σ`` over the sample (an unbiased estimate of the sum), at about K/T of an epoch's cost on
    long segments. Validation, early stopping and every diagnostic stay on whole segments. A segment of
    ``T ≤ K`` steps uses all of them, so ``sampled_steps ≥`` the longest segment is eq. 1 exactly
    (docs/method.md §4, docs/benchmarks.md for when to choose it). A model may fix its own (``rrd`` always
    fits with the randomized loss: :meth:`fit_loss`)."""
    sampled_steps: int = 64
    """The randomized loss's K: the number of steps sampled per segment per batch (RRD's MuJoCo K = 64)."""
    sampling: str = "uniform"
    """The randomized loss's sample: ``uniform`` (RRD's: K distinct steps uniformly without replacement) or
    ``stratified`` (one step drawn uniformly in each of K equal strata of the segment: every step is still
    drawn with probability K/T, so the estimate stays unbiased, but a reward that changes smoothly along the
    segment is summed with far less variance, and the variance term that pulls r̂ towards a constant within a
    segment shrinks with it)."""
    bias_correction: bool | None = None
    """The randomized loss (RRD's "RRD-L(RD)" form): subtract the unbiased estimate of the sampled sum's
    variance, ``T²(1 − K/T)·s²/K`` per segment (s² the sample variance of r̂ over the K steps), so the loss is
    an unbiased estimate of eq. 1. Without it the expected loss is eq. 1 plus that variance, a pull towards a
    constant r̂ within a segment. ``null`` (the default) takes the reward model's own
    (:attr:`default_bias_correction`: on for ReSymNet, off for ``rrd``, RRD's own default; docs/benchmarks.md
    has the measurements). Refused with ``sampling: stratified`` (the variance of a stratified draw is another
    formula)."""
    precision: str = "32-true"
    """Precision of the fit's Trainer, Lightning's names: ``32-true`` (the default) or ``bf16-mixed`` (bfloat16
    autocast of the matmuls, faster on CPUs with AVX512-BF16 or AMX (docs/benchmarks.md has the measurements);
    refused where the CPU or GPU has no bf16). Weights, optimiser and validation sums stay float32."""
    warm_start: bool = False
    """Refits (cycle ≥ 1) start from the previous cycle's fitted model (its best weights) instead of a fresh
    initialisation; the optimiser, learning-rate schedule and early stopping start afresh. Off (the paper's and
    the reference code's refit from scratch) by default."""
    relabel: bool = False
    """Also relabel the sparse channel of replay samples with the current model at update time (not the
    paper's default, which shapes once at env-step time)."""

    @property
    def bias_corrected(self) -> bool:
        """``bias_correction`` resolved: as set, or (``null``) the model's :attr:`default_bias_correction`."""
        if self.bias_correction is not None:
            return bool(self.bias_correction)
        return self.default_bias_correction

    @property
    def stores_dense_features(self) -> bool:
        """Whether the loop's segment stores keep the dense-reward columns (ReSymNet's "w/o dense" ablation
        stores none; every other model's store keeps them, read or not)."""
        return True

    @property
    def samples_steps(self) -> bool:
        """Whether the fit's loss reads a sample of each segment's steps (:meth:`fit_loss` is randomized)."""
        return self.loss == "randomized"

    def fit_loss(self) -> FitLoss:
        """The fit's training loss, chosen once: :class:`~prism.reward.losses.SumLoss` (eq. 1) or
        :class:`~prism.reward.losses.RandomizedSumLoss` with this config's K, sampling and bias correction."""
        from prism.reward.losses import NormalisedSumLoss, RandomizedSumLoss, SumLoss

        if not self.samples_steps:
            return NormalisedSumLoss() if self.loss == "normalised" else SumLoss()
        return RandomizedSumLoss(self.sampled_steps, self.sampling, self.bias_corrected)

    def fit_loss_label(self) -> str:
        """The fit's training loss as the progress line names it: ``<model>, <loss>`` (``rrd, randomized loss,
        K=64``); ReSymNet's leaves its name out. Runs of two losses write the same phases; without this, their
        logs read alike."""
        return f"{self.name}, {self._loss_label()}"

    def _loss_label(self) -> str:
        if self.samples_steps:
            return f"randomized loss, K={self.sampled_steps}"
        return "eq. 1 loss / T" if self.loss == "normalised" else "eq. 1 loss"

    def __post_init__(self) -> None:
        self.validate()

    def check_own_keys(self) -> None:
        """The hook for a reward model's own keys: override it in your model's config subclass to check them.

        Raise ``ValueError("reward.<key>: ...")`` for a bad value, e.g. with :mod:`prism.core.checks`
        (``checks.non_negative("reward.ridge", self.ridge)``). :meth:`validate` runs it after the shared keys'
        checks, on construction, so a plug-in need not call ``super()``; ``prism fit`` then stops with that one line, exit code 2,
        before the run folder is made. The built-in models check their keys in :meth:`validate`."""

    def _check_own_keys(self) -> None:
        """:meth:`check_own_keys`, its error named after the model when its message does not name the key."""
        try:
            self.check_own_keys()
        except ValueError as err:
            line = (str(err).strip().splitlines() or [type(err).__name__])[0]
            if not line.startswith("reward."):  # the loader's one-line rule: the line starts with the key
                line = f"reward ({self.name}): {line}"
            raise ValueError(line) from None

    def validate(self) -> None:
        """Raise ``ValueError`` (one line, starting with the ``reward.*`` key) when a value is out of range;
        run on construction, so a config loaded from YAML and one built in Python are checked alike. A
        plug-in's own keys go in :meth:`check_own_keys` instead."""
        from prism.plugins.registry import REWARDS

        # A registered method or an importable class path (``package.module:Name``, a user shaper).
        REWARDS.check("reward.name", self.name)
        checks.positive("reward.max_epochs", self.max_epochs)
        checks.positive("reward.patience", self.patience)
        checks.positive("reward.val_every", self.val_every)
        checks.in_open_unit_interval("reward.val_fraction", self.val_fraction)
        checks.non_negative("reward.threads", self.threads)
        checks.require(
            "reward.stacked_fit", isinstance(self.stacked_fit, bool), "be true or false", self.stacked_fit
        )
        checks.one_of("reward.loss", self.loss, FIT_LOSSES)
        checks.positive("reward.sampled_steps", self.sampled_steps)
        checks.require(
            "reward.bias_correction", self.bias_correction is None or isinstance(self.bias_correction, bool),
            "be true, false or null", self.bias_correction,
        )  # fmt: skip
        if self.samples_steps and self.bias_corrected:
            # s² (the sample variance over the K sampled steps) needs two steps.
            checks.require("reward.sampled_steps", self.sampled_steps >= 2, "be >= 2 with bias_correction",
                           self.sampled_steps)  # fmt: skip
        checks.one_of("reward.sampling", self.sampling, FIT_SAMPLINGS)
        # The correction is the variance of a uniform sample without replacement (another for strata); on by
        # default for ReSymNet, so the message says what to set.
        if self.samples_steps and self.bias_corrected and self.sampling != "uniform":
            state = "true" if self.bias_correction else "null, on for this model"
            raise ValueError(
                f"reward.bias_correction: must be false with reward.sampling=stratified, got {state} "
                "(add reward.bias_correction=false)"
            )
        checks.one_of("reward.precision", self.precision, FIT_PRECISIONS)
        checks.require(
            "reward.warm_start", isinstance(self.warm_start, bool), "be true or false", self.warm_start
        )
        if self.warm_start:
            from prism.plugins.registry import REWARD_MODELS

            # A plain plug-in fit (fit=, not fitter=) is handed no previous model to start from.
            model = REWARDS.entry("reward.name", self.name).model
            checks.require(
                "reward.warm_start",
                model is None or REWARD_MODELS.entry("reward.name", model).fitter is not None,
                f"be false with reward.name={self.name} (its reward model {model!r} has a plain fit, which "
                "takes no previous model)",
                self.warm_start,
            )
        if self.stacked_fit:
            from prism.plugins.registry import REWARD_MODELS

            # Only a model registered with a population fit has one (ReSymNet's; RRD fits per member).
            model = REWARDS.entry("reward.name", self.name).model
            checks.require(
                "reward.stacked_fit",
                model is None or REWARD_MODELS.entry("reward.name", model).population_fitter is not None,
                f"be false with reward.name={self.name} (its reward model {model!r} has no stacked population fit)",
                self.stacked_fit,
            )
            # The stacked population fit (prism/reward/fitting/stacked.py) is eq. 1 from a fresh start only.
            checks.require(
                "reward.loss", self.loss == "sum", "be sum with reward.stacked_fit=true", self.loss
            )
            checks.require(
                "reward.warm_start",
                not self.warm_start,
                "be false with reward.stacked_fit=true",
                self.warm_start,
            )
        self._check_own_keys()


@dataclass
class ReSymNetConfig(RewardConfig):
    """``reward.name: resymnet``: the shared keys and ReSymNet's ensemble, network and optimiser
    (docs/method.md §4)."""

    name: str = "resymnet"
    ensemble_size: int = 3
    """Number K of ensemble members; K = 1 is the "w/o ensemble" ablation."""
    hidden: int = 256
    """Hidden width of ReSymNet."""
    dropout: float = 0.3
    """Dropout probability inside the residual blocks (training only; prediction is in eval mode)."""
    residual: bool = True
    """Two residual blocks (True) or the "w/o residual" ablation ``Linear→LN→ReLU→Linear``."""
    use_dense_features: bool = True
    """``h_t = [s_t, a_t, r_dense_t]`` (True) or the "w/o dense rewards" ablation ``h_t = [s_t, a_t]``."""
    lr: float = 0.005
    """AdamW learning rate."""
    weight_decay: float = 0.01
    """AdamW (decoupled) weight decay."""
    grad_clip: float = 1.0
    """Gradient-norm clip, applied per ensemble member (as if each were trained alone)."""
    lr_decay: float = 0.99
    """ExponentialLR factor, stepped once per epoch."""
    batch_size: int = 32
    """Segments per training batch."""
    terminal_feature: bool = False
    """Append the termination flag ``d_t`` to ``h_t``: 1 on the step that terminates its episode (a fall),
    0 on every other step, a truncated last step included. The fit reads it from the segment store's step
    flags, the shaper from the env's ``terminated`` at that step, relabelling from the replay's stored
    ``done`` (termination only): the same flag everywhere (docs/method.md §4c; not the paper's)."""
    conserve_return: bool = False
    """Shape each released segment with ``f(h_t) + (R − Σ_s f(h_s)) / T``: the model's prediction shifted so
    the segment's shaped rewards sum exactly to its released return R, a learned shape on top of uniform R/T.
    The shaper holds a segment's transitions until it is released, as ``uniform`` does (docs/method.md §4c;
    not the paper's). Refused with ``reward.relabel`` (a replay batch knows no segments)."""

    @property
    def stores_dense_features(self) -> bool:
        return self.use_dense_features

    def fit_loss_label(self) -> str:
        return self._loss_label()  # the paper's model: the loss alone names the fit

    def validate(self) -> None:
        super().validate()
        checks.positive("reward.ensemble_size", self.ensemble_size)
        checks.positive("reward.hidden", self.hidden)
        checks.require("reward.dropout", 0.0 <= self.dropout < 1.0, "lie in [0, 1)", self.dropout)
        checks.positive("reward.lr", self.lr)
        checks.non_negative("reward.weight_decay", self.weight_decay)
        checks.positive("reward.grad_clip", self.grad_clip)
        checks.require("reward.lr_decay", 0.0 < self.lr_decay <= 1.0, "lie in (0, 1]", self.lr_decay)
        checks.positive("reward.batch_size", self.batch_size)
        for key in ("terminal_feature", "conserve_return"):
            checks.require(f"reward.{key}", isinstance(getattr(self, key), bool), "be true or false",
                           getattr(self, key))  # fmt: skip
        if self.conserve_return:
            checks.require("reward.relabel", not self.relabel, "be false with reward.conserve_return=true",
                           self.relabel)  # fmt: skip
        if self.stacked_fit:
            # The stacked population fit builds the paper's model only.
            for key in ("terminal_feature", "conserve_return"):
                checks.require(f"reward.{key}", not getattr(self, key), "be false with reward.stacked_fit=true",
                               getattr(self, key))  # fmt: skip


@dataclass
class RRDConfig:
    """``reward.name: rrd``'s own keys: randomized return decomposition's reward network and optimiser (Ren et
    al., ICLR 2022; the released code's MuJoCo defaults; docs/method.md §4b)."""

    hidden: int = 256
    """Width of the network's two hidden ReLU layers, ``[s, a, s − s'] → H → H → 1``."""
    lr: float = 3e-4
    """Adam learning rate (no weight decay, no gradient clip, no schedule)."""
    batch_size: int = 4
    """Segments per training batch (episodes when ``env.p_rel`` = 0), ``reward.sampled_steps`` steps of each:
    RRD's batch of 256 sampled steps is 4 episodes × K = 64."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """One-line ``ValueError`` starting with the ``reward.rrd.*`` key for a value out of range."""
        checks.positive("reward.rrd.hidden", self.hidden)
        checks.positive("reward.rrd.lr", self.lr)
        checks.positive("reward.rrd.batch_size", self.batch_size)


@dataclass
class RRDRewardConfig(RewardConfig):
    """``reward.name: rrd``: the shared keys and RRD's own under ``reward.rrd``. RRD always fits with the
    randomized loss (``reward.loss`` does not apply), uncorrected unless ``reward.bias_correction: true``
    (its paper's "RRD", the released code's ``rrd_bias_correction: False``)."""

    default_bias_correction: ClassVar[bool] = False

    name: str = "rrd"
    rrd: RRDConfig = field(default_factory=RRDConfig)
    """RRD's network and optimiser."""

    @property
    def samples_steps(self) -> bool:
        return True  # RRD's loss is the randomized one, whatever reward.loss says

    def validate(self) -> None:
        super().validate()
        self.rrd.validate()
