"""Issue R item 1: every reward fit's quality on record (summary.json ``reward_fits``, TensorBoard ``reward/``).

Each number is checked against a brute-force computation: plain Python loops over the episodes, with the
per-step true reward recomputed from the toy env's own dynamics (outward progress ``10 (|p'| − |p|)``, read off
consecutive observations), not from the store's ``true_sparse`` column that the code under test reads.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from toy_runs import toy_run

from prism.data.collect import collect_episodes, uniform_random_policy
from prism.data.segments import EPISODE_FINAL, TERMINATED, SegmentStore
from prism.envs import TOY_SPEC, make_env
from prism.loop.phases import PrismLoopCallback
from prism.loop.run import fit_run
from prism.reward.quality import score_segments

CONF = Path(__file__).resolve().parents[1] / "conf"


def _pearson(x: list[float], y: list[float]) -> float | None:
    n = len(x)
    if n < 2:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def brute_force(episodes: list[dict], predict) -> dict:
    """The :class:`RewardQuality` fields by loops over episodes (p_rel = 0: one segment per episode).

    ``episodes``: dicts with ``features [T, F]``, ``true [T]``, ``released_sum`` and ``terminated``."""
    preds_all, true_all, pred_nf, true_nf = [], [], [], []
    pred_term, true_term, pred_other, true_other = [], [], [], []
    sq_errors = []
    for ep in episodes:
        preds = [
            float(predict(torch.as_tensor(ep["features"][t : t + 1]))[0]) for t in range(len(ep["true"]))
        ]
        sq_errors.append((sum(preds) - ep["released_sum"]) ** 2)
        last = len(preds) - 1
        for t, (p, y) in enumerate(zip(preds, ep["true"])):
            preds_all.append(p)
            true_all.append(y)
            if t != last:
                pred_nf.append(p)
                true_nf.append(y)
            if t == last and ep["terminated"]:
                pred_term.append(p)
                true_term.append(y)
            else:
                pred_other.append(p)
                true_other.append(y)

    def mean(v):
        return sum(v) / len(v) if v else None

    return {
        "segments": len(episodes),
        "episodes": len(episodes),
        "steps": len(preds_all),
        "segment_sum_mse": mean(sq_errors),
        "pearson": _pearson(preds_all, true_all),
        "pearson_non_final": _pearson(pred_nf, true_nf),
        "terminal_steps": len(pred_term),
        "mean_predicted_terminal": mean(pred_term),
        "mean_true_terminal": mean(true_term),
        "mean_predicted_other": mean(pred_other),
        "mean_true_other": mean(true_other),
    }


def assert_quality_equal(ours: dict, expected: dict) -> None:
    assert set(ours) == set(expected)
    for key, value in expected.items():
        if value is None or isinstance(value, int):
            assert ours[key] == value, key
        else:
            assert ours[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def toy_radius_progress(features: np.ndarray, next_obs_radius: float) -> np.ndarray:
    """The toy env's channel 0 recomputed from its observations: ``10 (|p_{t+1}| − |p_t|)``; obs index 1 is
    ``|p|`` before each step and ``next_obs_radius`` the radius after the last step."""
    radius = np.append(features[:, 1].astype(np.float64), next_obs_radius)
    return 10.0 * np.diff(radius)


def _toy_episodes(store: SegmentStore, segments) -> list[dict]:
    """The selected episodes as brute_force wants them (each segment is one episode at p_rel = 0)."""
    out = []
    offsets = store.segment_offsets
    for s in segments:
        lo, hi = int(offsets[s]), int(offsets[s + 1])
        flags = store.step_flags[lo:hi]
        out.append(
            {
                "features": store.features[lo:hi].clone(),
                "true": store.true_sparse[lo:hi].double().tolist(),
                "released_sum": float(store.targets[s]),
                "terminated": bool(flags[-1] & TERMINATED),
            }
        )
    return out


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
    assert_quality_equal(ours, brute_force(_toy_episodes(store, chosen.tolist()), predict))
    assert ours["terminal_steps"] > 0


def test_every_fit_is_on_record_and_each_number_is_the_brute_force_one(tmp_path, monkeypatch):
    """A 3-cycle toy PRISM run: summary.json lists 3 fits; each record's validation numbers and each refit's
    new-episode numbers (scored by the *previous* fit's model) equal loops over the stored episodes."""
    fitted: list = []  # a deep copy of every model the loop installs, in order (spy; behaviour unchanged)
    original = PrismLoopCallback.set_model

    def spy(self, agent, models):
        fitted.append(copy.deepcopy(models[0] if isinstance(models, list | tuple) else models))
        return original(self, agent, models)

    monkeypatch.setattr(PrismLoopCallback, "set_model", spy)
    run_dir = tmp_path / "run"
    overrides = toy_run({"loop.cycles": 3, "loop.steps_per_cycle": 200, "figures": "false"})
    run = fit_run([str(CONF / "quickstart.yaml")], [*overrides, f"run_dir={run_dir}"])
    summary = json.loads((run_dir / "summary.json").read_text())
    records = summary["reward_fits"]
    assert [r["cycle"] for r in records] == [0, 1, 2] and len(fitted) == 3
    store = run.loop.store
    collections = store.segment_collections()
    assert store.collection_starts == [0, 5, 8]  # 5 random, then 3 + 3 expert episodes
    for k, record in enumerate(records):
        model = fitted[k]
        summary_k = model.fit_summary
        val = summary_k.val_segments.tolist()
        # the store as it was at fit k: every segment of collections 0..k
        in_store = [s for s in range(store.num_segments) if int(collections[s]) <= k]
        assert record["store"]["segments"] == len(in_store) and record["store"]["episodes"] == len(in_store)
        assert record["store"]["steps"] == int(store.segment_lengths[in_store].sum())
        assert record["store"]["validation"]["segments"] == len(val)
        assert record["store"]["train"]["segments"] == len(in_store) - len(val)
        assert (
            record["store"]["train"]["steps"] + record["store"]["validation"]["steps"]
            == record["store"]["steps"]
        )
        assert record["epochs_run"] == summary_k.epochs_run and record["best_epoch"] == summary_k.best_epoch
        assert record["wall_time_s"] == pytest.approx(summary_k.wall_time_s)
        assert_quality_equal(record["validation"], brute_force(_toy_episodes(store, val), model.predict))
        expert_val = [s for s in val if int(collections[s]) >= 1]
        if expert_val:
            assert_quality_equal(
                record["validation_expert"], brute_force(_toy_episodes(store, expert_val), model.predict)
            )
        else:
            assert record["validation_expert"] is None
        if k == 0:
            assert record["new_episodes"] is None  # no model before the first fit
        else:
            new = [s for s in range(store.num_segments) if int(collections[s]) == k]
            previous = fitted[k - 1]
            assert_quality_equal(
                record["new_episodes"], brute_force(_toy_episodes(store, new), previous.predict)
            )
    # the same numbers in TensorBoard, against env steps, in the member's main run
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    main_events = [p for p in run_dir.glob("tb/**/events.out.tfevents*") if "reward_fit" not in p.parts]
    values: dict[str, list[tuple[int, float]]] = {}
    for events in main_events:
        acc = EventAccumulator(str(events))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            values.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    pearson = sorted(values["reward/val_pearson"])
    assert [s for s, _ in pearson] == [r["env_steps"] for r in records]
    assert [v for _, v in pearson] == pytest.approx([r["validation"]["pearson"] for r in records], rel=1e-5)
    new_mse = sorted(values["reward/new_segment_sum_mse"])
    assert [v for _, v in new_mse] == pytest.approx(
        [r["new_episodes"]["segment_sum_mse"] for r in records[1:]], rel=1e-5
    )
    assert sorted(values["reward/validation_steps"])[-1][1] == records[-1]["store"]["validation"]["steps"]


def test_a_method_without_a_model_records_no_fit(tmp_path):
    run_dir = tmp_path / "oracle"
    fit_run(
        [str(CONF / "quickstart.yaml"), str(CONF / "method" / "oracle.yaml")],
        [*toy_run({"figures": "false"}), f"run_dir={run_dir}"],
    )
    assert json.loads((run_dir / "summary.json").read_text())["reward_fits"] == []
