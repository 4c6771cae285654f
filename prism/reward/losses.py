"""The reward model's objective: pure functions for the paper's trajectory-sum regression (eq. 1) and its
randomized form over sampled steps (randomized return decomposition, Ren et al., ICLR 2022), and the loss
objects a fit is given once (:class:`SumLoss`, :class:`NormalisedSumLoss`, :class:`RandomizedSumLoss`; TorchRL's
``LossModule`` idea):
each returns named terms, ``loss`` the one trained on, and owns the step sampler its batches need."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple, Protocol

import torch
from torch import Tensor

from prism.data.datamodule import MemberBatch, SegmentBatch, StepSampler


def segment_sums(values: Tensor, segment_ids: Tensor, num_segments: int) -> Tensor:
    """Per-segment sums of per-step values, without a Python loop.

    Args:
        values: ``[..., N]`` per-step values (leading dims, e.g. ensemble members, are batched).
        segment_ids: ``[..., N]`` long, same shape, each in ``[0, num_segments]``. The extra id
            ``num_segments`` is a *padding* slot: its sum is computed and discarded, so padded steps
            contribute nothing (and receive zero gradient).
        num_segments: number B of real segments.

    Returns:
        ``[..., B]`` with ``out[..., b] = Σ_{t: segment_ids[..., t] = b} values[..., t]``.
    """
    out = values.new_zeros((*values.shape[:-1], num_segments + 1))
    return out.scatter_add(-1, segment_ids, values)[..., :num_segments]


def trajectory_sum_loss(step_rewards: Tensor, segment_ids: Tensor, targets: Tensor) -> Tensor:
    """Trajectory-sum regression loss (paper eq. 1), one value per ensemble member.

    ``L = mean_i (Σ_{t ∈ seg_i} r̂(h_t) − R_i)²`` over the B segments of a batch.

    Args:
        step_rewards: ``[K, N]`` predicted per-step rewards r̂(h_t) (K members, N padded steps).
        segment_ids: ``[K, N]`` segment of each step in ``[0, B]`` (``B`` marks padding).
        targets: ``[K, B]`` released sums R_i.

    Returns:
        ``[K]`` the loss of each member. Sum (not average) it over members before ``backward`` so each
        member's gradient is exactly the gradient of its own loss.
    """
    sums = segment_sums(step_rewards, segment_ids, targets.shape[-1])
    return (sums - targets).pow(2).mean(dim=-1)


def length_normalised_sum_loss(step_rewards: Tensor, segment_ids: Tensor, targets: Tensor) -> Tensor:
    """Eq. 1 with each segment's squared error divided by its length, one value per ensemble member (not the
    paper's; docs/method.md §4c).

    ``L = mean_i (Σ_{t ∈ seg_i} r̂(h_t) − R_i)² / T_i`` over the B segments of a batch.

    Why ``T_i``: if the per-step residuals ``r̂_t − r_t`` were independent with a common variance σ², the
    segment's error ``Σ r̂ − R`` would have variance ``T_i σ²``; dividing by ``T_i`` weighs each segment by
    the inverse of that variance (the Gaussian likelihood of the sums), so every segment counts alike instead
    of the longest dominating as they do in eq. 1. (RRD's code divides by ``T_i²``, regressing the per-step
    mean on ``R_i/T_i``: it weighs short segments more still.)

    Args:
        step_rewards: ``[K, N]`` predicted per-step rewards r̂(h_t) (K members, N padded steps).
        segment_ids: ``[K, N]`` segment of each step in ``[0, B]`` (``B`` marks padding).
        targets: ``[K, B]`` released sums R_i.

    Returns:
        ``[K]`` the loss of each member (sum it over members before ``backward``, as for eq. 1).
    """
    n_seg = targets.shape[-1]
    sums = segment_sums(step_rewards, segment_ids, n_seg)
    # T_i from the batch's own step → segment map (padding goes to the discarded slot B).
    lengths = segment_sums(torch.ones_like(step_rewards), segment_ids, n_seg)
    return ((sums - targets).pow(2) / lengths.clamp_min(1)).mean(dim=-1)


def randomized_sum_loss(
    step_rewards: Tensor,
    segment_ids: Tensor,
    targets: Tensor,
    segment_lengths: Tensor,
    sampled_steps: Tensor,
    bias_correction: bool = False,
) -> Tensor:
    """Randomized return decomposition (RRD, Ren et al., ICLR 2022: L_Rand-RD), one value per member.

    Segment i of length ``T_i`` contributes the ``K_i = min(K, T_i)`` steps ``I_i`` sampled uniformly without
    replacement; ``Ŝ_i = (T_i / K_i) Σ_{t ∈ I_i} r̂_t`` is an unbiased estimate of its sum ``S_i = Σ_t r̂_t``, and

        ``L = mean_i (Ŝ_i − R_i)²``,   ``E_I[L_i] = (S_i − R_i)² + Var_I(Ŝ_i)``,
        ``Var_I(Ŝ_i) = T_i² (1 − K_i/T_i) σ_i² / K_i``   (σ_i²: r̂'s variance over the segment's T_i steps,
        denominator T_i − 1; the finite-population variance of a sample sum).

    ``bias_correction`` subtracts the unbiased estimate of that variance, ``T_i² (1 − K_i/T_i) s_i² / K_i``
    with ``s_i²`` the sample variance (denominator ``K_i − 1``) of r̂ over ``I_i``, so that the loss is an
    unbiased estimate of eq. 1's; without it the variance term pulls r̂ towards a constant within a segment
    (RRD's default form). Where ``K_i = T_i`` every step is used: ``Ŝ_i = 1.0 · S_i`` and the correction's
    factor ``1 − K_i/T_i`` is 0, so the loss is :func:`trajectory_sum_loss` bit for bit (value and gradient).

    Args:
        step_rewards: ``[M, N]`` predicted rewards of the sampled steps (M members).
        segment_ids: ``[M, N]`` segment of each step in ``[0, B]`` (``B`` marks padding).
        targets: ``[M, B]`` released sums R_i.
        segment_lengths: ``[M, B]`` T_i.
        sampled_steps: ``[M, B]`` K_i (≥ 1).
        bias_correction: subtract the variance estimate (needs ``K_i ≥ 2`` wherever ``K_i < T_i``).

    Returns:
        ``[M]`` the loss of each member (sum it over members before ``backward``, as for eq. 1).
    """
    n_seg = targets.shape[-1]
    lengths = segment_lengths.to(step_rewards.dtype)
    counts = sampled_steps.to(step_rewards.dtype)
    sampled_sums = segment_sums(step_rewards, segment_ids, n_seg)  # Σ_{t ∈ I_i} r̂_t
    estimate = (lengths / counts) * sampled_sums  # Ŝ_i
    per_segment = (estimate - targets).pow(2)
    if bias_correction:
        means = sampled_sums / counts
        padded_means = torch.cat([means, means.new_zeros((*means.shape[:-1], 1))], dim=-1)
        deviations = step_rewards - padded_means.gather(-1, segment_ids)  # r̂_t − mean over I_i
        sample_var = segment_sums(deviations.pow(2), segment_ids, n_seg) / (counts - 1).clamp_min(1)
        per_segment = per_segment - lengths.pow(2) * (1 - counts / lengths) * sample_var / counts
    return per_segment.mean(dim=-1)


class LossTargets(NamedTuple):
    """What a loss compares the per-step predictions ``[M, N]`` of M members with: each step's segment, the
    released sums and, for a batch that samples steps, the segments' lengths and sample sizes. Taken from a
    batch once (:meth:`of_batch`, :meth:`of_member`), so no loss slices a batch itself."""

    segment_ids: Tensor
    """``[M, N]`` segment of each step in ``[0, B]`` (``B`` marks padding)."""
    targets: Tensor
    """``[M, B]`` released sums R_i."""
    segment_lengths: Tensor | None = None
    """``[M, B]`` T_i (a batch of sampled steps only)."""
    sampled_steps: Tensor | None = None
    """``[M, B]`` K_i (a batch of sampled steps only)."""

    @classmethod
    def of_batch(cls, batch: SegmentBatch) -> LossTargets:
        """Every member of a padded training batch (its ``[K, ·]`` rows as they are)."""
        return cls(batch.segment_ids, batch.targets, batch.segment_lengths, batch.sampled_steps)

    @classmethod
    def of_member(cls, batch: MemberBatch, k: int) -> LossTargets:
        """Member ``k`` of a ragged training batch, as a batch of one member (``M = 1``)."""
        rows = slice(k, k + 1)
        lengths, sampled = batch.segment_lengths, batch.sampled_steps
        return cls(
            batch.segment_ids[k][None],
            batch.targets[rows],
            None if lengths is None else lengths[rows],
            None if sampled is None else sampled[rows],
        )


class FitLoss(Protocol):
    """A fit's training loss, chosen once (``reward.loss``, or the model's own: RRD's is always randomized)."""

    label: str
    """How the fit's progress line names it (``eq. 1 loss``, ``randomized loss, K=64``)."""

    @property
    def sampler(self) -> StepSampler | None:
        """The steps its batches must hold (None: every step of each segment)."""
        ...

    def __call__(self, pred: Tensor, targets: LossTargets) -> dict[str, Tensor]:
        """Named terms ``[M]`` (one value per member) of per-step predictions ``pred [M, N]`` against
        ``targets``, with ``loss`` the objective (sum it over members before ``backward``)."""
        ...


@dataclass(frozen=True)
class SumLoss:
    """Paper eq. 1 over every step of each segment (:func:`trajectory_sum_loss`)."""

    label: ClassVar[str] = "eq. 1 loss"
    sampler: ClassVar[StepSampler | None] = None

    def __call__(self, pred: Tensor, targets: LossTargets) -> dict[str, Tensor]:
        return {"loss": trajectory_sum_loss(pred, targets.segment_ids, targets.targets)}  # (eq. 1)


@dataclass(frozen=True)
class NormalisedSumLoss:
    """Eq. 1 with each segment's squared error divided by its length (:func:`length_normalised_sum_loss`)."""

    label: ClassVar[str] = "eq. 1 loss / T"
    sampler: ClassVar[StepSampler | None] = None

    def __call__(self, pred: Tensor, targets: LossTargets) -> dict[str, Tensor]:
        return {"loss": length_normalised_sum_loss(pred, targets.segment_ids, targets.targets)}  # (eq. 1 / T)


@dataclass(frozen=True)
class RandomizedSumLoss:
    """Randomized return decomposition on ``sampled_steps`` sampled steps of each segment
    (:func:`randomized_sum_loss`), its sample drawn by :attr:`sampler`."""

    sampled_steps: int
    """K."""
    sampling: str = "uniform"
    """``uniform`` (K distinct steps) or ``stratified`` (one per stratum of T/K steps)."""
    bias_correction: bool = False
    """Subtract the sampled sum's variance estimate (uniform sampling only)."""

    def __post_init__(self) -> None:
        if self.bias_correction and self.sampling != "uniform":
            raise ValueError("RandomizedSumLoss: bias_correction is the variance of a uniform sample")

    @property
    def label(self) -> str:
        return f"randomized loss, K={self.sampled_steps}"

    @property
    def sampler(self) -> StepSampler:
        return StepSampler(self.sampled_steps, stratified=self.sampling == "stratified")

    def __call__(self, pred: Tensor, targets: LossTargets) -> dict[str, Tensor]:
        lengths, sampled = targets.segment_lengths, targets.sampled_steps
        assert lengths is not None and sampled is not None  # (its sampler's batch)
        loss = randomized_sum_loss(
            pred, targets.segment_ids, targets.targets, lengths, sampled, bias_correction=self.bias_correction
        )
        return {"loss": loss}


def pearson_correlation(x: Tensor, y: Tensor, eps: float = 1e-12) -> Tensor:
    """Pearson correlation of two 1-D tensors (population moments); 0 when either is constant."""
    xc = x - x.mean()
    yc = y - y.mean()
    denom = torch.sqrt((xc * xc).sum() * (yc * yc).sum())
    return torch.where(denom > eps, (xc * yc).sum() / denom.clamp_min(eps), torch.zeros_like(denom))
