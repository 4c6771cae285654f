"""The tensor replay buffer: layout, wrap-around, sampling."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from prism.data.replay import ReplayBatch, ReplayBuffer


def _add(buf: ReplayBuffer, i: int) -> None:
    buf.add(
        obs=np.full(3, i, np.float32),
        action=np.full(2, i + 0.5, np.float32),
        reward=np.array([i, -i], np.float32),
        next_obs=np.full(3, i + 1, np.float32),
        done=i % 2 == 0,
        weight=np.array([0.25, 0.75], np.float32),
    )


def test_fields_round_trip():
    buf = ReplayBuffer(10, 3, 2, 2)
    _add(buf, 4)
    b = buf.all()
    assert isinstance(b, ReplayBatch)
    torch.testing.assert_close(b.obs, torch.full((1, 3), 4.0))
    torch.testing.assert_close(b.action, torch.full((1, 2), 4.5))
    torch.testing.assert_close(b.reward, torch.tensor([[4.0, -4.0]]))
    torch.testing.assert_close(b.next_obs, torch.full((1, 3), 5.0))
    torch.testing.assert_close(b.done, torch.tensor([1.0]))
    torch.testing.assert_close(b.weight, torch.tensor([[0.25, 0.75]]))


def test_wrap_around_overwrites_oldest():
    buf = ReplayBuffer(5, 3, 2, 2)
    for i in range(7):
        _add(buf, i)
    assert len(buf) == 5 and buf.position == 2
    # rows 0,1 were overwritten by transitions 5,6
    assert buf.storage[0, :, 0].tolist() == [5, 6, 2, 3, 4]
    assert buf.all().obs[:, 0].tolist() == [2, 3, 4, 5, 6]  # oldest first
    sampled = buf.sample(200, generator=torch.Generator().manual_seed(0))
    assert set(sampled.obs[:, 0].tolist()) == {2.0, 3.0, 4.0, 5.0, 6.0}
    # every field of a sampled row belongs to the same transition
    torch.testing.assert_close(sampled.next_obs[:, 0], sampled.obs[:, 0] + 1)
    torch.testing.assert_close(sampled.reward[:, 1], -sampled.obs[:, 0])


def test_add_batch_wraps_like_add():
    a, b = ReplayBuffer(4, 3, 2, 2), ReplayBuffer(4, 3, 2, 2)
    for i in range(3):
        _add(a, i)
        _add(b, i)
    extra = ReplayBuffer(8, 3, 2, 2)
    for i in range(3, 6):
        _add(a, i)
        _add(extra, i)
    b.add_batch(extra.all())
    assert a.position == b.position == 2 and len(a) == len(b) == 4
    torch.testing.assert_close(a.storage, b.storage)


def test_sample_empty_raises_and_only_filled_rows_sampled():
    buf = ReplayBuffer(100, 3, 2, 2)
    with pytest.raises(RuntimeError):
        buf.sample(4)
    for i in range(3):
        _add(buf, i + 1)
    assert set(buf.sample(300).obs[:, 0].tolist()) == {1.0, 2.0, 3.0}  # never an unwritten zero row
