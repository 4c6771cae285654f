"""Trajectory-sum data for the reward model: variable-length segments → one released sum each (docs/method.md §4).

Batches are built by index gathering on the store's flat tensors (no per-sample collation): a batch of B
segments becomes the row indices of all their steps plus, for each step, its position ``0..B-1`` among the
batch's segments, which is what :func:`prism.reward.losses.segment_sums` needs.

For an ensemble of K members trained together, each member draws its *own* shuffle order every epoch, so a
training batch holds K different sets of segments. Two layouts of the same batches:

- padded (:class:`SegmentBatch`, the reference): ``features [K, N_max, F]`` padded to the longest member's
  step count, padded steps carrying segment id ``B`` (discarded by the loss);
- ragged (:class:`MemberBatch`, what a fit trains on on a CPU): each member's steps unpadded, so no arithmetic
  is spent on padding (a large share of the padded rows when short random-policy episodes sit beside long
  expert ones; docs/benchmarks.md, "Where the time went").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

import lightning as L
import torch
from torch import Tensor

from prism.data.features import standardisation_stats
from prism.data.segments import SegmentStore


def member_shuffle_seeds(seed: int, n_members: int) -> list[int]:
    """Shuffle-order seed of each ensemble member, derived from the split seed (distinct from the members'
    initialisation seeds, :func:`prism.reward.fitting.fit.ensemble_seeds`)."""
    return [int(seed) * 7919 + 104_729 * (k + 1) for k in range(n_members)]


class SegmentBatch(NamedTuple):
    """A batch of segments (``K`` leads in training batches); ``segment_ids`` in ``[0, B]``, B: padding."""

    features: Tensor  # [K, N, F] or [N, F], standardised
    segment_ids: Tensor  # [K, N] or [N] long
    targets: Tensor  # [K, B] or [B] released sums
    true_sparse: Tensor  # [K, N] or [N] true per-step sparse reward (diagnostics; 0 on padding)
    segment_lengths: Tensor | None = None  # [K, B] T of each segment, when the batch samples steps of it
    sampled_steps: Tensor | None = None  # [K, B] how many of its steps the batch holds (min(K, T))


class MemberBatch(NamedTuple):
    """A training batch in the ragged layout: member k's steps are ``features[k]`` (no padding).

    Holds the same segments, in the same order, as the padded :class:`SegmentBatch` of the same selection.
    """

    features: tuple[Tensor, ...]  # K × [N_k, F], standardised
    segment_ids: tuple[Tensor, ...]  # K × [N_k] long in [0, B)
    targets: Tensor  # [K, B] released sums
    steps: tuple[int, ...]  # N_k of each member (the padded layout's length is their max)
    next_steps: tuple[int, ...] | None  # N_k of the epoch's next batch (None on its last): lets the dropout
    # noise be drawn one batch ahead
    segment_lengths: Tensor | None = None  # [K, B] as in SegmentBatch (randomized loss only)
    sampled_steps: Tensor | None = None  # [K, B]


def gather_segments(offsets: Tensor, selection: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Row indices of the steps of the selected segments, grouped per row of ``selection``.

    Args:
        offsets: ``[S+1]`` segment offsets of the store.
        selection: ``[K, B]`` segment indices (K groups of B segments).

    Returns:
        ``(rows [K, N_max], segment_ids [K, N_max], valid [K, N_max])``: ``rows[k]`` lists the steps of
        ``selection[k, 0]``, then of ``selection[k, 1]``, …, padded with row 0; ``segment_ids`` gives the
        position b of each step's segment in ``selection[k]`` and ``B`` on padding.
    """
    k, b = selection.shape
    starts = offsets[selection]  # [K, B]
    lengths = offsets[selection + 1] - starts
    flat_len = lengths.reshape(-1)
    total = int(flat_len.sum())
    owner = torch.repeat_interleave(torch.arange(k * b), flat_len)  # flat (k, b) slot of every step
    seg_start_flat = torch.cumsum(flat_len, 0) - flat_len  # where each slot starts in the flat step list
    within = torch.arange(total) - seg_start_flat[owner]  # offset of the step inside its segment
    rows_flat = starts.reshape(-1)[owner] + within
    member = owner // b
    per_member = lengths.sum(dim=1)  # [K]
    member_start = torch.cumsum(per_member, 0) - per_member
    pos = torch.arange(total) - member_start[member]  # column of the step in its member's row
    n_max = int(per_member.max()) if k > 0 else 0
    rows = torch.zeros(k, n_max, dtype=torch.long)
    seg_ids = torch.full((k, n_max), b, dtype=torch.long)
    valid = torch.zeros(k, n_max, dtype=torch.bool)
    rows[member, pos] = rows_flat
    seg_ids[member, pos] = owner % b
    valid[member, pos] = True
    return rows, seg_ids, valid


def sample_segment_steps(
    offsets: Tensor,
    selection: Tensor,
    sampled_steps: int,
    generator: torch.Generator,
    stratified: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Randomized return decomposition's sample: ``min(K, T)`` steps of each selected segment (K =
    ``sampled_steps``), kept in time order; every step of a segment is in it with probability K/T, so
    ``(T/K)·Σ`` over the sample is an unbiased estimate of the segment's sum.

    - uniform (RRD's): K distinct steps drawn uniformly without replacement. The draw is one uniform key per
      step of the longest selected segment (so the stream advances by the same amount for the same selection
      shape), and each segment keeps its K smallest keys.
    - ``stratified``: the segment cut into K strata of equal length T/K (real-valued bounds), one step drawn
      uniformly in each, ``⌊(j + u_j)·T/K⌋``. Each step's inclusion probability is still K/T, but the sample
      spreads over the whole segment, so a reward that changes smoothly along it is summed with far less
      variance. Where T/K < 2 a step straddling two strata may be drawn twice (then counted twice: the
      estimate stays unbiased).

    A segment of ``T ≤ K`` steps keeps all of them, in order, so the rows are then exactly
    :func:`gather_segments`'s (the randomized loss is eq. 1 bit for bit).

    Args:
        offsets: ``[S+1]`` segment offsets of the store.
        selection: ``[M, B]`` segment indices (M groups, e.g. ensemble members, of B segments).
        sampled_steps: K.
        generator: the fit's own sampling stream.

    Returns:
        ``(rows [M, N_max], segment_ids [M, N_max], valid [M, N_max], counts [M, B])`` laid out as
        :func:`gather_segments` lays them out (padding row 0, id B), with ``counts`` the steps kept per segment.
    """
    m, b = selection.shape
    starts = offsets[selection]  # [M, B]
    lengths = offsets[selection + 1] - starts
    t_max = int(lengths.max())
    kept = min(int(sampled_steps), t_max)
    if stratified:
        flat = lengths.reshape(-1, 1)
        j = torch.arange(kept)
        u = torch.rand(m * b, kept, generator=generator, dtype=torch.float64)
        strata = ((j + u) * flat / int(sampled_steps)).floor().long()  # [M·B, kept], non-decreasing, < T
        # A segment no longer than K keeps every step (its picks past T are dropped below).
        picked = torch.where(flat > int(sampled_steps), strata, j.expand(m * b, -1))
    else:
        keys = torch.rand(m * b, t_max, generator=generator)
        # Steps past a segment's end can never be drawn: their keys lie above every real one.
        keys.masked_fill_(torch.arange(t_max) >= lengths.reshape(-1, 1), 2.0)
        picked = keys.topk(kept, dim=-1, largest=False).indices.sort(dim=-1).values  # [M·B, kept]
    counts = lengths.clamp(max=int(sampled_steps))  # [M, B]
    # Sorted by position, a segment's real picks (positions < T) come before any past its end.
    real = torch.arange(kept) < counts.reshape(-1, 1)  # [M·B, kept]
    step_rows = (starts.reshape(-1, 1) + picked).reshape(m, b * kept)
    step_ids = torch.arange(b).repeat_interleave(kept).expand(m, -1)
    real = real.reshape(m, b * kept)
    per_member = counts.sum(dim=1)
    n_max = int(per_member.max()) if m > 0 else 0
    rows = torch.zeros(m, n_max, dtype=torch.long)
    seg_ids = torch.full((m, n_max), b, dtype=torch.long)
    valid = torch.zeros(m, n_max, dtype=torch.bool)
    pos = real.long().cumsum(dim=1) - 1  # column of each real pick in its member's row
    member = torch.arange(m).unsqueeze(1).expand(-1, b * kept)
    rows[member[real], pos[real]] = step_rows[real]
    seg_ids[member[real], pos[real]] = step_ids[real]
    valid[member[real], pos[real]] = True
    return rows, seg_ids, valid, counts


@dataclass(frozen=True)
class StepSampler:
    """The K steps of each segment a batch holds for a sampled loss (the randomized loss owns one)."""

    steps: int
    stratified: bool = False

    def sample(self, offsets: Tensor, selection: Tensor, generator: torch.Generator) -> tuple[Tensor, ...]:
        return sample_segment_steps(offsets, selection, self.steps, generator, self.stratified)


def step_sampling_seed(seed: int) -> int:
    """Seed of the randomized loss's step-sampling stream, derived from the split seed (apart from the
    members' shuffle and initialisation seeds, so the sum and randomized losses see the same batches)."""
    return int(seed) * 6_364_136 + 1_442_695


class _MemberShuffledBatches:
    """Iterable of training batches; a fresh permutation per member each time it is iterated (each epoch)."""

    def __init__(self, dm: TrajectorySumDataModule):
        self.dm = dm

    def __len__(self) -> int:
        n = self.dm.train_segments.shape[0]
        return -(-n // self.dm.batch_size)

    def __iter__(self) -> Iterator[SegmentBatch]:
        dm = self.dm
        n = dm.train_segments.shape[0]
        perms = torch.stack([torch.randperm(n, generator=g) for g in dm.shuffle_generators])  # [K, n]
        selections = [
            dm.train_segments[perms[:, start : start + dm.batch_size]] for start in range(0, n, dm.batch_size)
        ]
        if not dm.ragged:
            for selection in selections:
                yield dm.make_batch(selection)
            return
        lengths = dm.offsets[1:] - dm.offsets[:-1]
        if dm.sampler is not None:  # a sampled loss: min(K, T) steps of each segment
            lengths = lengths.clamp(max=dm.sampler.steps)
        steps = [tuple(lengths[selection].sum(dim=1).tolist()) for selection in selections]
        for i, selection in enumerate(selections):
            yield dm.make_member_batch(selection, steps[i + 1] if i + 1 < len(steps) else None)


BatchT = TypeVar("BatchT")


class FixedBatches(Generic[BatchT]):
    """Iterable over pre-built batches (a plain list would be read by Lightning as several dataloaders)."""

    def __init__(self, batches: list[BatchT]):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[BatchT]:
        return iter(self.batches)


class TrajectorySumDataModule(L.LightningDataModule):
    """Seeded split by segment, standardised features, member-shuffled training batches.

    Args:
        store: the collected segments.
        batch_size: segments per batch (32).
        val_fraction: fraction of segments held out (0.2), at least one segment on each side.
        seed: seeds the split.
        n_members: ensemble size K (one shuffle order per member).
        shuffle_seeds: one seed per member for its shuffle order (default derived from ``seed``).
        use_dense_features: False drops the store's dense-reward columns ("w/o dense").
        val_step_budget: validation batches hold whole segments, about this many steps each.
        ragged: training batches as :class:`MemberBatch` (unpadded) instead of the padded
            :class:`SegmentBatch`; same segments, same order.
        sampler: the loss's :class:`StepSampler`: training batches hold ``min(K, T)`` steps of each segment,
            redrawn every batch from a stream seeded by :func:`step_sampling_seed`; None (eq. 1): every step.
            Validation batches always hold whole segments.
        next_obs: append each step's ``s_{t+1}`` to its features (:meth:`SegmentStore.inputs`; for RRD).
        standardise: z-score the features (ReSymNet); False: raw, the identity scaler (RRD's default).
        terminal: append each step's termination flag ``d_t`` (:attr:`SegmentStore.terminated_steps`, 0/1;
            ReSymNet's ``reward.terminal_feature``).

    The scaler (``feature_mean``, ``feature_scale``) is fitted on the steps of training segments only
    (population std, zero variance → 1) and copied into the fitted model by :func:`fit_resymnet_model`.
    """

    def __init__(
        self,
        store: SegmentStore,
        batch_size: int = 32,
        val_fraction: float = 0.2,
        seed: int = 0,
        n_members: int = 1,
        shuffle_seeds: Sequence[int] | None = None,
        use_dense_features: bool = True,
        val_step_budget: int = 8192,
        ragged: bool = False,
        sampler: StepSampler | None = None,
        next_obs: bool = False,
        standardise: bool = True,
        terminal: bool = False,
    ):
        super().__init__()
        if store.num_segments < 2:
            raise ValueError(
                f"TrajectorySumDataModule: need at least 2 segments, store has {store.num_segments}"
            )
        if not use_dense_features or store.n_dense == 0:
            use_dense_features = False
        self.store = store
        self.batch_size = int(batch_size)
        self.val_fraction = float(val_fraction)
        self.seed = int(seed)
        self.n_members = int(n_members)
        seeds = member_shuffle_seeds(self.seed, n_members) if shuffle_seeds is None else shuffle_seeds
        if len(seeds) != n_members:
            raise ValueError(f"shuffle_seeds: expected {n_members} seeds, got {len(seeds)}")
        self.shuffle_seeds = [int(s) for s in seeds]
        self.use_dense_features = use_dense_features
        self.val_step_budget = int(val_step_budget)
        self.ragged = bool(ragged)
        self.sampler = sampler
        if next_obs and not store.has_next_obs:
            raise ValueError("TrajectorySumDataModule: next_obs=True, but the store keeps none")
        self.next_obs, self.standardise = bool(next_obs), bool(standardise)
        self.terminal = bool(terminal)
        self._prepared = False

    @property
    def in_features(self) -> int:
        s = self.store
        dense = s.n_dense if self.use_dense_features else 0
        return (
            s.obs_dim + s.act_dim + dense + (s.obs_dim if self.next_obs else 0) + (1 if self.terminal else 0)
        )

    def setup(self, stage: str | None = None) -> None:
        if self._prepared:
            return
        store = self.store
        n_seg = store.num_segments
        n_val = min(max(1, round(self.val_fraction * n_seg)), n_seg - 1)
        perm = torch.randperm(n_seg, generator=torch.Generator().manual_seed(self.seed))
        self.val_segments = perm[:n_val].sort().values
        self.train_segments = perm[n_val:].sort().values

        feats = store.inputs(self.use_dense_features, self.next_obs, self.terminal)
        train_rows = torch.zeros(n_seg, dtype=torch.bool)
        train_rows[self.train_segments] = True
        train_rows = train_rows[store.segment_index]  # step belongs to a training segment
        if self.standardise:
            self.feature_mean, self.feature_scale = standardisation_stats(feats[train_rows])
        else:  # raw inputs: the identity scaler ((x − 0) / 1 is x exactly)
            self.feature_mean, self.feature_scale = torch.zeros(feats.shape[1]), torch.ones(feats.shape[1])
        self.features = (feats - self.feature_mean) / self.feature_scale  # once: batches only gather rows
        self.offsets = store.segment_offsets.clone()
        self.targets = store.targets.clone()
        self.true_sparse = store.true_sparse.clone()
        self.shuffle_generators = [torch.Generator().manual_seed(s) for s in self.shuffle_seeds]
        self.step_generator = torch.Generator().manual_seed(step_sampling_seed(self.seed))
        self._val_batches = self._build_val_batches()
        self._prepared = True

    def _gather(self, selection: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
        """The steps a training batch of ``selection [K, B]`` holds: every step of each segment, or (randomized
        loss) the sampled ones, with each segment's length and kept count."""
        if self.sampler is None:
            return (*gather_segments(self.offsets, selection), None, None)
        rows, seg_ids, valid, counts = self.sampler.sample(self.offsets, selection, self.step_generator)
        lengths = self.offsets[selection + 1] - self.offsets[selection]
        return rows, seg_ids, valid, lengths, counts

    def make_batch(self, selection: Tensor) -> SegmentBatch:
        """Training batch for ``selection [K, B]`` segment indices."""
        rows, seg_ids, valid, lengths, counts = self._gather(selection)
        return SegmentBatch(
            features=self.features[rows],
            segment_ids=seg_ids,
            targets=self.targets[selection],
            true_sparse=self.true_sparse[rows] * valid,
            segment_lengths=lengths,
            sampled_steps=counts,
        )

    def make_member_batch(self, selection: Tensor, next_steps: tuple[int, ...] | None = None) -> MemberBatch:
        """Training batch for ``selection [K, B]`` segment indices in the ragged layout."""
        rows, seg_ids, valid, lengths, counts = self._gather(selection)
        # valid[k] is a prefix of row k: one gather of all real rows, then per-member views.
        steps = tuple(valid.sum(dim=1).tolist())
        return MemberBatch(
            features=self.features[rows[valid]].split(steps),
            segment_ids=seg_ids[valid].split(steps),
            targets=self.targets[selection],
            steps=steps,
            next_steps=next_steps,
            segment_lengths=lengths,
            sampled_steps=counts,
        )

    def _build_val_batches(self) -> list[SegmentBatch]:
        lengths = self.offsets[self.val_segments + 1] - self.offsets[self.val_segments]
        # Group consecutive validation segments into chunks of about val_step_budget steps (never splitting a
        # segment), so memory stays bounded for 1000-step segments.
        chunk = (torch.cumsum(lengths, 0) - lengths) // max(self.val_step_budget, 1)
        batches = []
        for c in torch.unique(chunk):
            selection = self.val_segments[chunk == c].unsqueeze(0)
            rows, seg_ids, _ = gather_segments(self.offsets, selection)
            batches.append(
                SegmentBatch(
                    features=self.features[rows[0]],
                    segment_ids=seg_ids[0],
                    targets=self.targets[selection[0]],
                    true_sparse=self.true_sparse[rows[0]],
                )
            )
        return batches

    def train_dataloader(self) -> _MemberShuffledBatches:
        return _MemberShuffledBatches(self)

    # A fit resumed from a snapshot (prism.reward.fitting.fit) continues each member's shuffle stream where it was:
    # Lightning saves this with the fit's checkpoint and loads it after ``setup``.
    def state_dict(self) -> dict[str, list[Tensor] | Tensor]:
        return {
            "shuffle_generators": [g.get_state() for g in self.shuffle_generators],
            "step_generator": self.step_generator.get_state(),
        }

    def load_state_dict(self, state_dict: dict[str, list[Tensor] | Tensor]) -> None:
        for generator, state in zip(self.shuffle_generators, state_dict["shuffle_generators"], strict=True):
            generator.set_state(state)
        if "step_generator" in state_dict:  # (snapshots taken before the randomized loss lack it: eq. 1 fits)
            self.step_generator.set_state(state_dict["step_generator"])

    def val_dataloader(self) -> FixedBatches[SegmentBatch]:
        return FixedBatches(self._val_batches)
