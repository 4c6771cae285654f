"""A population's stacked reward-fit data: batch i of every member's segment store in one padded batch.

Each store keeps the data module a lone fit builds (its split, scaler and shuffle orders from its fit seed);
:class:`StackedSegmentData` walks them in step, store-major (network ``s·K + k`` is store s's network k). A
store whose epoch has fewer batches sits out the rest of the epoch (``store_steps`` 0). The fit itself is
:mod:`prism.reward.fitting.stacked`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import lightning as L
import torch
from torch import Tensor

from prism.data.datamodule import FixedBatches, SegmentBatch, TrajectorySumDataModule, member_shuffle_seeds
from prism.data.segments import SegmentStore
from prism.reward.config import ReSymNetConfig


class StackedBatch(NamedTuple):
    """Batch i of S stores for S·K networks (store-major: network ``s·K + k``)."""

    features: Tensor  # [S·K, N, F], each store's batch padded to the longest
    segment_ids: Tensor  # [S·K, N] in [0, B]; B marks padding
    targets: Tensor  # [S·K, B], zero beyond a store's own segments
    segment_mask: Tensor  # [S·K, B] the store's real segments
    true_sparse: Tensor  # [S·K, N]
    store_steps: tuple[int, ...]  # padded length N_s of store s's own batch, 0 when it has none (host ints)


def stack_batches(batches: Sequence[SegmentBatch | None], k: int) -> StackedBatch:
    """One :class:`StackedBatch` from each store's batch (``None``: no batch; ``[N, F]`` validation batches
    are shared by the store's K networks)."""
    real = [b for b in batches if b is not None]
    n = max(b.features.shape[-2] for b in real)
    n_seg = max(b.targets.shape[-1] for b in real)
    width, dtype = real[0].features.shape[-1], real[0].features.dtype
    s_count = len(batches)
    features = torch.zeros(s_count, k, n, width, dtype=dtype)
    ids = torch.full((s_count, k, n), n_seg, dtype=torch.long)
    targets = torch.zeros(s_count, k, n_seg, dtype=real[0].targets.dtype)
    mask = torch.zeros(s_count, k, n_seg, dtype=torch.bool)
    true = torch.zeros(s_count, k, n, dtype=real[0].true_sparse.dtype)
    steps = [0] * s_count
    for s, b in enumerate(batches):
        if b is None:
            continue
        ns, bs = b.features.shape[-2], b.targets.shape[-1]
        features[s, :, :ns] = b.features
        # The store's own padding id is its B_s; the stacked batch's is the longest B.
        ids[s, :, :ns] = torch.where(b.segment_ids == bs, n_seg, b.segment_ids)
        targets[s, :, :bs] = b.targets
        mask[s, :, :bs] = True
        true[s, :, :ns] = b.true_sparse
        steps[s] = ns
    flat = lambda t: t.reshape(s_count * k, *t.shape[2:])  # noqa: E731
    return StackedBatch(flat(features), flat(ids), flat(targets), flat(mask), flat(true), tuple(steps))


class _StackedTrainBatches:
    def __init__(self, data: StackedSegmentData):
        self.data = data

    def __len__(self) -> int:
        return max(len(dm.train_dataloader()) for dm in self.data.dms)

    def __iter__(self) -> Iterator[StackedBatch]:
        iters = [iter(dm.train_dataloader()) for dm in self.data.dms]
        for _ in range(len(self)):
            yield stack_batches([next(it, None) for it in iters], self.data.k)


class StackedSegmentData(L.LightningDataModule):
    """The S stores' data modules (padded layout, set up) as one stream of :class:`StackedBatch`."""

    def __init__(self, dms: Sequence[TrajectorySumDataModule], k: int):
        super().__init__()
        self.dms, self.k = list(dms), int(k)
        if any(dm.ragged for dm in self.dms) or len({dm.in_features for dm in self.dms}) != 1:
            raise ValueError("StackedSegmentData: padded data modules of one feature width")
        self.val_counts = torch.tensor([dm.val_segments.shape[0] for dm in self.dms])

    def state_dict(self) -> dict[str, list]:
        """Each store's shuffle streams (what a snapshot of the fit needs to go on as if never stopped)."""
        return {"stores": [dm.state_dict() for dm in self.dms]}

    def load_state_dict(self, state_dict: dict[str, list]) -> None:
        for dm, state in zip(self.dms, state_dict["stores"], strict=True):
            dm.load_state_dict(state)

    def train_dataloader(self) -> _StackedTrainBatches:
        return _StackedTrainBatches(self)

    def val_dataloader(self) -> FixedBatches[StackedBatch]:
        vals = [dm.val_dataloader().batches for dm in self.dms]
        count = max(len(v) for v in vals)
        return FixedBatches(
            [stack_batches([v[i] if i < len(v) else None for v in vals], self.k) for i in range(count)]
        )


def stacked_data(
    stores: Sequence[SegmentStore], config: ReSymNetConfig, seeds: Sequence[int]
) -> StackedSegmentData:
    """Each store's data module exactly as :func:`fit_resymnet_model` builds it (padded layout), stacked."""
    k, dms = config.ensemble_size, []
    for store, seed in zip(stores, seeds):
        dm = TrajectorySumDataModule(
            store, batch_size=config.batch_size, val_fraction=config.val_fraction, seed=seed, n_members=k,
            shuffle_seeds=member_shuffle_seeds(seed, k), use_dense_features=config.use_dense_features,
        )  # fmt: skip
        dm.setup("fit")
        dms.append(dm)
    return StackedSegmentData(dms, k)


__all__ = ["StackedBatch", "StackedSegmentData", "stack_batches", "stacked_data"]
