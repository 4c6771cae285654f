"""Trajectory-sum data for the reward model: variable-length segments → one released sum each (docs/method.md §4).

Batches are built by index gathering on the store's flat tensors (no per-sample collation): a batch of B
segments becomes the row indices of all their steps plus, for each step, its position ``0..B-1`` among the
batch's segments, which is what :func:`prism.reward.losses.segment_sums` needs.

For an ensemble of K members trained together, each member draws its *own* shuffle order every epoch, so a
training batch holds K different sets of segments. Two layouts of the same batches:

- padded (:class:`SegmentBatch`, the reference): ``features [K, N_max, F]`` padded to the longest member's
  step count, padded steps carrying segment id ``B`` (discarded by the loss);
- ragged (:class:`MemberBatch`, what :func:`~prism.reward.module.fit_reward_model` trains on on a CPU): each
  member's steps unpadded, so no arithmetic is spent on padding (with 1000 short random-policy episodes
  beside 100 long expert ones, padding is ~40 % of the padded batch's rows).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, NamedTuple, TypeVar

import lightning as L
import torch
from torch import Tensor

from prism.data.features import standardisation_stats
from prism.data.segments import SegmentStore


def member_shuffle_seeds(seed: int, n_members: int) -> list[int]:
    """Shuffle-order seed of each ensemble member, derived from the split seed (distinct from the members'
    initialisation seeds, :func:`prism.reward.module.member_seeds`)."""
    return [int(seed) * 7919 + 104_729 * (k + 1) for k in range(n_members)]


class SegmentBatch(NamedTuple):
    """A batch of segments; the leading ``K`` dim is present for training batches only.

    ``segment_ids`` are in ``[0, B]`` where ``B = targets.shape[-1]`` marks padding.
    """

    features: Tensor  # [K, N, F] or [N, F], standardised
    segment_ids: Tensor  # [K, N] or [N] long
    targets: Tensor  # [K, B] or [B] released sums
    true_sparse: Tensor  # [K, N] or [N] true per-step sparse reward (diagnostics; 0 on padding)


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

    The scaler (``feature_mean``, ``feature_scale``) is fitted on the steps of training segments only
    (population std, zero variance → 1) and copied into the fitted model by :func:`fit_reward_model`.
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
        self._prepared = False

    @property
    def in_features(self) -> int:
        s = self.store
        return s.obs_dim + s.act_dim + (s.n_dense if self.use_dense_features else 0)

    def setup(self, stage: str | None = None) -> None:
        if self._prepared:
            return
        store = self.store
        n_seg = store.num_segments
        n_val = min(max(1, round(self.val_fraction * n_seg)), n_seg - 1)
        perm = torch.randperm(n_seg, generator=torch.Generator().manual_seed(self.seed))
        self.val_segments = perm[:n_val].sort().values
        self.train_segments = perm[n_val:].sort().values

        feats = store.features[:, : self.in_features]
        train_rows = torch.zeros(n_seg, dtype=torch.bool)
        train_rows[self.train_segments] = True
        train_rows = train_rows[store.segment_index]  # step belongs to a training segment
        self.feature_mean, self.feature_scale = standardisation_stats(feats[train_rows])
        # Standardise once; batches then only gather rows.
        self.features = (feats - self.feature_mean) / self.feature_scale
        self.offsets = store.segment_offsets.clone()
        self.targets = store.targets.clone()
        self.true_sparse = store.true_sparse.clone()
        self.shuffle_generators = [torch.Generator().manual_seed(s) for s in self.shuffle_seeds]
        self._val_batches = self._build_val_batches()
        self._prepared = True

    def make_batch(self, selection: Tensor) -> SegmentBatch:
        """Training batch for ``selection [K, B]`` segment indices."""
        rows, seg_ids, valid = gather_segments(self.offsets, selection)
        return SegmentBatch(
            features=self.features[rows],
            segment_ids=seg_ids,
            targets=self.targets[selection],
            true_sparse=self.true_sparse[rows] * valid,
        )

    def make_member_batch(self, selection: Tensor, next_steps: tuple[int, ...] | None = None) -> MemberBatch:
        """Training batch for ``selection [K, B]`` segment indices in the ragged layout."""
        rows, seg_ids, valid = gather_segments(self.offsets, selection)
        # valid[k] is a prefix of row k: one gather of all real rows, then per-member views.
        steps = tuple(valid.sum(dim=1).tolist())
        return MemberBatch(
            features=self.features[rows[valid]].split(steps),
            segment_ids=seg_ids[valid].split(steps),
            targets=self.targets[selection],
            steps=steps,
            next_steps=next_steps,
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

    # A fit resumed from a snapshot (prism.reward.module) continues each member's shuffle stream where it was:
    # Lightning saves this with the fit's checkpoint and loads it after ``setup``.
    def state_dict(self) -> dict[str, list[Tensor]]:
        return {"shuffle_generators": [g.get_state() for g in self.shuffle_generators]}

    def load_state_dict(self, state_dict: dict[str, list[Tensor]]) -> None:
        for generator, state in zip(self.shuffle_generators, state_dict["shuffle_generators"], strict=True):
            generator.set_state(state)

    def val_dataloader(self) -> FixedBatches[SegmentBatch]:
        return FixedBatches(self._val_batches)
