"""SegmentStore, collector and TrajectorySumDataModule against naive per-segment computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from prism.data.collect import collect_episodes, uniform_random_policy
from prism.data.datamodule import TrajectorySumDataModule, gather_segments
from prism.data.segments import SegmentStore
from prism.envs import TOY_SPEC, make_env


def _random_store(n_episodes: int = 30, p: float = 0.2, seed: int = 0, capacity: int = 8) -> SegmentStore:
    rng = np.random.default_rng(seed)
    store = SegmentStore(obs_dim=3, act_dim=2, n_dense=1, capacity=capacity)
    for _ in range(n_episodes):
        t = int(rng.integers(1, 25))
        feats = rng.normal(size=(t, 6)).astype(np.float32)
        released = rng.random(t) < p
        released[-1] = True
        true = rng.normal(size=t).astype(np.float32)
        emitted = np.zeros(t, dtype=np.float32)
        acc = 0.0
        for i in range(t):
            acc += true[i]
            if released[i]:
                emitted[i], acc = acc, 0.0
        store.add_episode(feats, released, emitted, true)
    return store


def test_store_layout_matches_naive_segmentation():
    rng = np.random.default_rng(1)
    store = SegmentStore(obs_dim=2, act_dim=1, n_dense=0, capacity=2)
    expected_segments = []  # (features rows, target)
    all_rows = []
    for _ in range(12):
        t = int(rng.integers(1, 10))
        feats = rng.normal(size=(t, 3)).astype(np.float32)
        released = rng.random(t) < 0.3
        released[-1] = True
        emitted = rng.normal(size=t).astype(np.float32) * released
        store.add_episode(feats, released, emitted, np.zeros(t))
        start = 0
        for i in range(t):
            if released[i]:
                expected_segments.append((feats[start : i + 1], emitted[i]))
                start = i + 1
        all_rows.append(feats)
    assert store.num_segments == len(expected_segments)
    assert len(store) == sum(len(r) for r in all_rows)
    assert store.num_episodes == 12
    torch.testing.assert_close(store.features, torch.from_numpy(np.concatenate(all_rows)))
    off = store.segment_offsets
    for i, (rows, target) in enumerate(expected_segments):
        torch.testing.assert_close(store.features[off[i] : off[i + 1]], torch.from_numpy(rows))
        assert float(store.targets[i]) == pytest.approx(float(target))
        assert torch.all(store.segment_index[off[i] : off[i + 1]] == i)
    assert torch.all(store.segment_lengths > 0)


def test_open_segment_rejected():
    store = SegmentStore(1, 1, 0)
    with pytest.raises(ValueError, match="last step"):
        store.add_episode(np.zeros((3, 2)), [False, True, False], np.zeros(3), np.zeros(3))


def test_save_load_roundtrip_weights_only(tmp_path):
    store = _random_store()
    path = tmp_path / "segments.pt"
    store.save(path)
    raw = torch.load(path, weights_only=True)  # plain tensors and ints only
    assert isinstance(raw["features"], torch.Tensor)
    loaded = SegmentStore.load(path)
    for name in ("features", "segment_index", "true_sparse", "targets", "segment_offsets"):
        torch.testing.assert_close(getattr(loaded, name), getattr(store, name))
    assert (loaded.obs_dim, loaded.act_dim, loaded.n_dense) == (3, 2, 1)
    # A loaded store keeps growing (next refinement cycle).
    before = loaded.num_segments
    loaded.extend(_random_store(5, seed=9))
    assert loaded.num_segments > before
    assert int(loaded.segment_offsets[-1]) == len(loaded)


@pytest.mark.parametrize("p_rel", [0.0, 0.3])
def test_collect_episodes_on_toy_env(p_rel):
    env = make_env(TOY_SPEC, sparse_channel=0, p_rel=p_rel, seed=3)
    store = SegmentStore(TOY_SPEC.obs_dim, TOY_SPEC.act_dim, TOY_SPEC.n_objectives - 1)
    stats = collect_episodes(
        env, uniform_random_policy(env.action_space, 0), 8, store, sparse_channel=0, seed=0
    )
    assert stats.episodes == 8 and stats.steps == len(store) and stats.segments == store.num_segments
    if p_rel == 0.0:
        assert store.num_segments == 8  # one segment per episode
    else:
        assert store.num_segments > 8  # early releases cut episodes into several segments
    # Every target is the sum of the true per-step sparse rewards of its segment.
    sums = torch.zeros(store.num_segments).index_add_(0, store.segment_index, store.true_sparse)
    torch.testing.assert_close(sums, store.targets, atol=1e-4, rtol=1e-4)
    assert stats.mean_true_return.shape == (2,)
    assert stats.mean_true_return[0] == pytest.approx(float(store.targets.sum()) / 8, rel=1e-4, abs=1e-4)
    # The dense column is the energy channel -|a|^2 of the stored action.
    a = store.features[:, 6:8]
    torch.testing.assert_close(store.features[:, 8], -(a * a).sum(1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("p_rel", [0.0, 0.3])
def test_a_store_made_for_next_observations_keeps_each_steps_s_prime(p_rel, tmp_path):
    """RRD's r̂(s, a, s'): within an episode s'_t is s_{t+1}; on its last step it is the final observation the
    env returned (a toy episode ends when the mass leaves the unit disc: |p| = obs[1] > 1 there, never in a
    reset observation); the store saves and extends with them."""
    env = make_env(TOY_SPEC, sparse_channel=0, p_rel=p_rel, seed=3)
    store = SegmentStore(TOY_SPEC.obs_dim, TOY_SPEC.act_dim, 1, next_obs=True)
    collect_episodes(env, uniform_random_policy(env.action_space, 0), 6, store, sparse_channel=0, seed=0)
    obs, next_obs = store.features[:, : TOY_SPEC.obs_dim], store.next_obs
    final = (store.step_flags & 1).bool()
    assert int(final.sum()) == 6 and bool(final[-1])
    torch.testing.assert_close(next_obs[:-1][~final[:-1]], obs[1:][~final[:-1]], rtol=0, atol=0)
    terminal_radius = next_obs[final, 1]
    assert bool((terminal_radius[store.step_flags[final] & 2 > 0] > 1.0).all())
    torch.testing.assert_close(
        store.inputs(use_dense=False, next_obs=True), torch.cat([store.features[:, :8], next_obs], 1)
    )
    store.save(tmp_path / "s.pt")
    loaded = SegmentStore.load(tmp_path / "s.pt")
    assert torch.load(tmp_path / "s.pt", weights_only=True)["version"] == 3
    torch.testing.assert_close(loaded.next_obs, next_obs, rtol=0, atol=0)
    loaded.extend(store)
    torch.testing.assert_close(loaded.next_obs, torch.cat([next_obs, next_obs]), rtol=0, atol=0)


def test_a_store_without_next_observations_is_saved_as_before_and_refuses_to_mix():
    store = _random_store(5)
    state = store.state_dict()
    assert state["version"] == 2 and "next_obs" not in state  # ReSymNet's stores and checkpoints unchanged
    loaded = SegmentStore.from_state_dict(state)
    assert not loaded.has_next_obs and torch.equal(loaded.inputs(), loaded.features)
    with pytest.raises(ValueError, match="reads next observations, but this store keeps none"):
        loaded.inputs(next_obs=True)
    with pytest.raises(ValueError, match="keeps no next observations"):
        loaded.add_episode(
            np.zeros((2, 6)), [False, True], np.zeros(2), np.zeros(2), next_obs=np.zeros((2, 3))
        )
    with pytest.raises(ValueError, match="pass next_obs"):
        SegmentStore(3, 2, 1, next_obs=True).add_episode(
            np.zeros((2, 6)), [False, True], np.zeros(2), np.zeros(2)
        )
    with pytest.raises(ValueError, match="different feature layouts"):
        SegmentStore(3, 2, 1, next_obs=True).extend(store)
    with pytest.raises(ValueError, match="next_obs=True, but the store keeps none"):
        TrajectorySumDataModule(store, next_obs=True)


def test_collect_without_dense_features():
    env = make_env(TOY_SPEC, sparse_channel=0, seed=0)
    store = SegmentStore(TOY_SPEC.obs_dim, TOY_SPEC.act_dim, 0)
    collect_episodes(env, uniform_random_policy(env.action_space, 0), 2, store, 0, use_dense_features=False)
    assert store.features.shape[1] == TOY_SPEC.obs_dim + TOY_SPEC.act_dim


def test_gather_segments_matches_naive_loop():
    store = _random_store(20)
    sel = torch.tensor([[3, 0, 7], [5, 5, 1]])
    rows, seg_ids, valid = gather_segments(store.segment_offsets, sel)
    off = store.segment_offsets
    for k in range(2):
        naive_rows = torch.cat([torch.arange(off[s], off[s + 1]) for s in sel[k]])
        naive_ids = torch.cat([torch.full((int(off[s + 1] - off[s]),), b) for b, s in enumerate(sel[k])])
        n = naive_rows.shape[0]
        assert torch.equal(rows[k, :n], naive_rows)
        assert torch.equal(seg_ids[k, :n], naive_ids)
        assert valid[k, :n].all() and not valid[k, n:].any()
        assert torch.all(seg_ids[k, n:] == 3)  # padding id = B


def test_datamodule_split_scaler_and_member_shuffles():
    store = _random_store(60)
    store._features[: len(store), 4] = 2.5  # a constant column: zero variance -> scale 1
    dm = TrajectorySumDataModule(store, batch_size=4, val_fraction=0.2, seed=5, n_members=2)
    dm.setup()
    train, val = set(dm.train_segments.tolist()), set(dm.val_segments.tolist())
    assert not train & val and train | val == set(range(store.num_segments))
    assert len(val) == round(0.2 * store.num_segments)

    # Scaler from training-segment steps only, computed independently with a Python loop.
    off = store.segment_offsets
    rows = torch.cat([store.features[off[s] : off[s + 1]] for s in sorted(train)]).double()
    mean = rows.mean(0)
    std = ((rows - mean) ** 2).mean(0).sqrt()
    torch.testing.assert_close(dm.feature_mean.double(), mean, atol=1e-5, rtol=1e-5)
    expected_scale = torch.where(std > 1e-8, std, torch.ones_like(std))
    torch.testing.assert_close(dm.feature_scale.double(), expected_scale, atol=1e-5, rtol=1e-5)
    assert float(dm.feature_scale[4]) == 1.0
    all_rows = store.features.double()
    assert not torch.allclose(all_rows.mean(0), mean, atol=1e-3)  # the split matters for this data

    # Same seed, same split; each member sees every training segment once per epoch in its own order.
    dm2 = TrajectorySumDataModule(store, batch_size=4, val_fraction=0.2, seed=5, n_members=2)
    dm2.setup()
    assert torch.equal(dm2.val_segments, dm.val_segments)
    batches = list(dm.train_dataloader())
    assert len(batches) == len(dm.train_dataloader()) == -(-len(train) // 4)
    orders = [[], []]
    for b in batches:
        for k in range(2):
            seen = b.segment_ids[k][b.segment_ids[k] < b.targets.shape[-1]]
            # Targets line up with the released sums of the gathered segments.
            assert seen.unique().numel() == b.targets.shape[-1]
        orders[0].append(b.targets[0])
        orders[1].append(b.targets[1])
    t0, t1 = torch.cat(orders[0]), torch.cat(orders[1])
    expected = store.targets[dm.train_segments]
    torch.testing.assert_close(t0.sort().values, expected.sort().values)
    torch.testing.assert_close(t1.sort().values, expected.sort().values)
    assert not torch.equal(t0, t1)  # different shuffle orders
    assert not torch.equal(
        t0, torch.cat([b.targets[0] for b in dm.train_dataloader()])
    )  # reshuffled per epoch

    # Validation batches cover each validation segment exactly once, standardised with the train scaler.
    vt = torch.cat([b.targets for b in dm.val_dataloader()])
    torch.testing.assert_close(vt, store.targets[dm.val_segments])
    vb = next(iter(dm.val_dataloader()))
    first = int(dm.val_segments[0])
    raw = store.features[off[first] : off[first + 1]]
    torch.testing.assert_close(vb.features[: raw.shape[0]], (raw - dm.feature_mean) / dm.feature_scale)


def test_datamodule_without_dense_drops_columns():
    store = _random_store(10)
    dm = TrajectorySumDataModule(store, n_members=1, use_dense_features=False)
    dm.setup()
    assert dm.in_features == store.obs_dim + store.act_dim
    assert dm.features.shape[1] == 5
