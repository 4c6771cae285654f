"""Issue 27 item 1: every reward fit's quality on record (summary.json ``reward_fits``, TensorBoard ``reward/``);
the end-to-end check of the records of a real run is in test_loop.py (it shares that file's toy PRISM run).

Each number is checked against a brute-force computation: plain Python loops over the episodes, with the
per-step true reward recomputed from the toy env's own dynamics (outward progress ``10 (|p'| − |p|)``, read off
consecutive observations), not from the store's ``true_sparse`` column that the code under test reads.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fit_quality_reference import assert_quality_equal, brute_force, store_episodes, toy_radius_progress

from prism.data.collect import collect_episodes, uniform_random_policy
from prism.data.segments import EPISODE_FINAL, TERMINATED, SegmentStore
from prism.envs import TOY_SPEC, make_env
from prism.reward.quality import score_segments


def test_store_flags_and_true_reward_match_the_toy_dynamics():
    """The store's flags mark each episode's last step (and termination) as the env reported it, and the true
    column it keeps is the env's channel 0 (recomputed here from the observations)."""
    spec = TOY_SPEC
    env = make_env(spec, sparse_channel=0, p_rel=0.0, seed=3)
    store = SegmentStore(spec.obs_dim, spec.act_dim, n_dense=1)
    # Random actions: some episodes leave the disc (terminated), a short time limit truncates the others.
    env.unwrapped.max_episode_steps = 40
    store.begin_collection()
    collect_episodes(env, uniform_random_policy(env.action_space, seed=1), 12, store, 0, seed=5)
    flags = store.step_flags
    finals = torch.nonzero(flags & EPISODE_FINAL).reshape(-1)
    assert finals.tolist() == (store.segment_offsets[1:] - 1).tolist()
    terminated = flags & TERMINATED
    assert 0 < int((terminated > 0).sum()) < 12  # both kinds of ending occur
    for s in range(store.num_segments):
        lo, hi = int(store.segment_offsets[s]), int(store.segment_offsets[s + 1])
        # The toy episode terminates exactly when the mass leaves the unit disc: the radius after the last
        # step is the radius before it plus its outward progress / 10; otherwise it hit the 40-step limit.
        radius_after = float(store.features[hi - 1, 1]) + float(store.true_sparse[hi - 1]) / 10.0
        assert bool(flags[hi - 1] & TERMINATED) == (radius_after > 1.0)
        assert radius_after > 1.0 or hi - lo == 40
        if hi - lo > 1:
            expected = toy_radius_progress(store.features[lo:hi].numpy(), float(store.features[hi - 1, 1]))
            np.testing.assert_allclose(store.true_sparse[lo : hi - 1].numpy(), expected[:-1], atol=1e-4)
    # save/load keeps flags and collection marks; a version-1 state dict (no flags) still loads
    again = SegmentStore.from_state_dict(store.state_dict())
    assert torch.equal(again.step_flags, store.step_flags) and again.collection_starts == [0]
    old = {k: v for k, v in store.state_dict().items() if k not in ("step_flags", "collection_starts")}
    old["version"] = 1
    legacy = SegmentStore.from_state_dict(old)
    assert int(legacy.step_flags.sum()) == 0 and legacy.collection_starts == []


def test_score_segments_equals_brute_force_on_a_known_predictor():
    spec = TOY_SPEC
    env = make_env(spec, sparse_channel=0, p_rel=0.0, seed=0)
    env.unwrapped.max_episode_steps = 30
    store = SegmentStore(spec.obs_dim, spec.act_dim, n_dense=1)
    collect_episodes(env, uniform_random_policy(env.action_space, seed=2), 15, store, 0, seed=9)

    def predict(features: torch.Tensor) -> torch.Tensor:  # a fixed "model": survival-biased, feature-driven
        return 0.7 * features[:, 1] - 0.3 * features[:, 6] + 0.2

    chosen = torch.tensor([1, 4, 5, 9, 13])
    ours = score_segments(predict, store, chosen).to_dict()
    assert_quality_equal(ours, brute_force(store_episodes(store, chosen.tolist()), predict))
    assert ours["terminal_steps"] > 0


def test_the_best_epoch_scalar_is_the_mean_best_epoch_not_the_epochs_run():
    """A record whose members ran longer than their best epoch (early stopping): TensorBoard's
    reward/best_epoch_mean is the mean of best_epoch."""
    from prism.loop.fit_phase import fit_record_scalars

    record = {
        "store": {"segments": 10, "train": {"segments": 8}, "validation": {"segments": 2}},
        "best_epoch": [3, 7, 11],
        "epochs_run": [24, 28, 32],
        "validation": {"pearson": 0.5},
        "validation_expert": None,
    }
    scalars = fit_record_scalars(record)
    assert scalars["reward/best_epoch_mean"] == 7.0
    assert scalars["reward/val_pearson"] == 0.5 and scalars["reward/validation_segments"] == 2.0


def test_segment_errors_are_scored_against_signed_targets_by_brute_force():
    """``segment_sum_mse`` and ``segment_rel_error`` (|Σ r̂ − R| / max(|R|, 1e-8)) of a prediction, segment by
    segment in plain Python, on a store whose released sums take both signs."""
    from segment_stores import synthetic_store

    from prism.reward.quality import score_segments

    store = synthetic_store(40, seed=3, max_length=6)
    targets = store.targets.tolist()
    assert min(targets) < 0 < max(targets)
    features = store.inputs(True, False)
    quality = score_segments(lambda f: 0.8 * f[:, 0] + 0.1, store)
    sums = [0.0] * store.num_segments
    for row, segment in enumerate(store.segment_index.tolist()):
        sums[segment] += 0.8 * float(features[row, 0]) + 0.1
    errors = [s - t for s, t in zip(sums, targets, strict=True)]
    assert quality.segment_sum_mse == pytest.approx(sum(e * e for e in errors) / len(errors), rel=1e-6)
    relative = [abs(e) / max(abs(t), 1e-8) for e, t in zip(errors, targets, strict=True)]
    assert quality.segment_rel_error == pytest.approx(sum(relative) / len(relative), rel=1e-6)


def test_a_fits_scalars_are_its_epochs_run_mean_and_its_best_epoch_mean_each_its_own():
    """``fit_scalars`` of a fit whose members stopped after their best epoch: reward/epochs_run_mean is the
    mean of the summary's ``epochs_run``, reward/best_epoch_mean that of ``best_epoch``, each from its own list."""
    from prism.loop.fit_phase import fit_scalars
    from prism.reward.fitting.fitter import FitSummary, FittedReward
    from prism.reward.quality import RewardQuality

    quality = RewardQuality(
        segments=2, episodes=2, steps=9, segment_sum_mse=0.1, segment_rel_error=0.2, pearson=0.5,
        pearson_non_final=0.4, terminal_steps=0, mean_predicted_terminal=None, mean_true_terminal=None,
        mean_predicted_other=0.1, mean_true_other=0.2,
    )  # fmt: skip
    summary = FitSummary(
        epochs_run=[24, 28, 32], best_epoch=[3, 7, 11], best_val_loss=[0.5, 0.25, 1.5], wall_time_s=12.5,
        seconds_per_epoch=0.4, n_train_segments=8, n_val_segments=2, validation=quality,
        validation_expert=None, val_segments=torch.tensor([3, 8]),
    )  # fmt: skip
    record = {
        "store": {"segments": 10, "train": {"segments": 8}, "validation": {"segments": 2}},
        "best_epoch": summary.best_epoch,
        "epochs_run": summary.epochs_run,
        "validation": quality.to_dict(),
        "validation_expert": None,
    }
    scalars = fit_scalars(FittedReward(None, summary), record)
    assert scalars["reward/epochs_run_mean"] == 28.0
    assert scalars["reward/best_epoch_mean"] == 7.0
    assert scalars["reward/best_val_loss_mean"] == pytest.approx(0.75)
    assert scalars["reward/fit_time_s"] == 12.5 and scalars["reward/train_segments"] == 8.0
    assert scalars["reward/val_correlation"] == 0.5 == scalars["reward/val_pearson"]


def test_uniform_rt_spreads_each_released_segment_sum_evenly_by_brute_force():
    """score_uniform on a store of many segments per episode: each step priced at its segment's released sum
    over the segment's length (not the episode's), so the segment sums are exact and the per-step Pearson is
    that of the step-wise spread against the true reward, both recomputed here in plain Python."""
    from fit_quality_reference import _pearson
    from segment_stores import synthetic_store

    from prism.reward.quality import latest_collection_segments, score_uniform

    store = synthetic_store(30, seed=5, max_length=7)
    lengths = store.segment_lengths.tolist()
    targets = store.targets.tolist()
    spread = [targets[s] / lengths[s] for s in store.segment_index.tolist()]
    quality = score_uniform(store)
    assert quality.segment_sum_mse == pytest.approx(0.0, abs=1e-9)
    assert quality.pearson == pytest.approx(_pearson(spread, store.true_sparse.double().tolist()), rel=1e-9)
    assert 0.0 < quality.pearson < 0.99  # the reward varies inside a segment: spreading it evenly loses that
    chosen = [2, 3, 11, 17]
    rows = [r for r, s in enumerate(store.segment_index.tolist()) if s in chosen]
    some = score_uniform(store, torch.tensor(chosen))
    assert some.steps == len(rows) and some.pearson == pytest.approx(
        _pearson([spread[r] for r in rows], [float(store.true_sparse[r]) for r in rows]), rel=1e-9
    )
    # the latest collection's segments: all of them before any collection was marked, then only the new ones
    assert latest_collection_segments(store).tolist() == list(range(30))
    store.begin_collection()
    store.extend(synthetic_store(4, seed=6))
    assert latest_collection_segments(store).tolist() == [30, 31, 32, 33]
