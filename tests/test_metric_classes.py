"""torchmetrics in prism (issue 21, item 13): HV / EUM / VO as ``Metric`` classes that accumulate an
evaluation's returns (checked against the functional metrics), used by the evaluation callback, and
ReSymNet's validation metrics (per-member MSE, Pearson correlation) as torchmetrics in the LightningModule."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torchmetrics import MeanSquaredError, MetricCollection, PearsonCorrCoef
from torchmetrics.utilities import dim_zero_cat

from prism.data.datamodule import SegmentBatch
from prism.envs import TOY_SPEC
from prism.evaluation.callback import EvaluationCallback
from prism.evaluation.config import EvalConfig
from prism.evaluation.result import EvalResult
from prism.metrics import functional as F
from prism.metrics.classes import ExpectedUtility, Hypervolume, VarianceObjective, evaluation_metrics
from prism.reward.config import ReSymNetConfig
from prism.reward.fitting.trajectory_sum_module import TrajectorySumModule, segment_errors
from prism.reward.losses import pearson_correlation
from prism.reward.models.resymnet_fit import resymnet_recipe


def _returns(seed: int, w: int = 9, e: int = 4, n_obj: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).normal(50.0, 20.0, size=(w, e, n_obj))


@pytest.mark.parametrize("n_obj", [2, 3])
def test_metric_classes_equal_the_functional_metrics_bit_for_bit(n_obj):
    returns = _returns(n_obj, n_obj=n_obj)
    ref, weights = np.zeros(n_obj), F.equally_spaced_weights(n_obj, 20)
    prefs = F.random_preferences(n_obj, 30, 7)
    mean, std = returns.mean(axis=1), returns.std(axis=1)
    front = F.pareto_front(mean)
    expected = {
        "hv": F.hypervolume(front, ref),
        "eum": F.expected_utility(front, weights),
        "vo": F.variance_objective(mean, std, prefs),
    }
    metrics = {"hv": Hypervolume(ref), "eum": ExpectedUtility(weights), "vo": VarianceObjective(prefs)}
    for name, metric in metrics.items():
        for chunk in np.array_split(returns, 3):  # the returns arrive in chunks of weights
            metric.update(torch.from_numpy(chunk))
        assert float(metric.compute()) == expected[name], name
        assert metric._reductions["returns"] is dim_zero_cat  # add_state(..., dist_reduce_fx="cat")
        metric.reset()
        assert metric.returns == []


def test_merged_states_equal_one_metric_over_all_returns():
    # What a multi-process sync does: every process's rows concatenated, then reduced.
    returns, ref = _returns(1), np.zeros(3)
    a, b, whole = Hypervolume(ref), Hypervolume(ref), Hypervolume(ref)
    a.update(torch.from_numpy(returns[:5]))
    b.update(torch.from_numpy(returns[5:]))
    whole.update(torch.from_numpy(returns))
    a.merge_state(b)
    assert float(a.compute()) == float(whole.compute())


def test_evaluation_metrics_use_the_protocols_weight_and_preference_sets():
    collection = evaluation_metrics(np.zeros(2), 2, 50, 40, 42)
    assert isinstance(collection, MetricCollection) and set(collection.keys()) == {"hv", "eum", "vo"}
    np.testing.assert_array_equal(collection["eum"].weights, F.equally_spaced_weights(2, 50))
    np.testing.assert_array_equal(collection["vo"].preferences, F.random_preferences(2, 40, 42))


def test_the_evaluation_callback_records_what_its_metrics_compute():
    cfg = EvalConfig(num_weights=4, episodes=3, eum_weights=10, vo_preferences=10)
    callback = EvaluationCallback(TOY_SPEC, cfg, run_seed=0)
    assert isinstance(callback.metrics, MetricCollection)
    returns = _returns(2, w=4, e=3, n_obj=2)
    result = EvalResult.from_returns(
        np.eye(2)[[0, 1, 0, 1]],
        returns,
        returns,
        np.ones((4, 3)),
        gamma=0.99,
        ref_point=TOY_SPEC.ref_point,
        eum_weights=F.equally_spaced_weights(2, 10),
        vo_preferences=F.random_preferences(2, 10, cfg.preference_seed),
    )
    stale = dataclasses.replace(result, hv=-1.0, eum=-1.0, vo=-1.0)
    measured = callback._measure(stale)
    assert (measured.hv, measured.eum, measured.vo) == (result.hv, result.eum, result.vo)


def test_resymnet_validation_metrics_are_torchmetrics_equal_to_the_formulas():
    torch.manual_seed(0)
    config = ReSymNetConfig(hidden=16, ensemble_size=3)
    module = TrajectorySumModule(resymnet_recipe(config), 5, config, [0, 1, 2])
    assert isinstance(module.val_mse, MeanSquaredError) and isinstance(module.val_corr, PearsonCorrCoef)
    module.eval()  # as Lightning's validation loop puts it: the network's dropout follows the mode
    module.on_validation_epoch_start()
    sse, count, preds, trues = torch.zeros(3), 0, [], []
    for _ in range(3):
        n, b = 40, 6
        batch = SegmentBatch(torch.randn(n, 5), torch.randint(0, b, (n,)), torch.randn(b) * 3, torch.randn(n))
        module.validation_step(batch, 0)
        pred = module.net(batch.features, dropout=False)
        sse += segment_errors(pred, batch)[0].detach()
        count += b
        preds.append(pred.mean(0).detach())
        trues.append(batch.true_sparse)
    # early stopping's loss: the old accumulator's value exactly
    assert torch.equal(module.val_mse.compute(), sse / count)
    corr = pearson_correlation(torch.cat(preds), torch.cat(trues))
    torch.testing.assert_close(module.val_corr.compute(), corr, atol=1e-5, rtol=0)


def test_a_constant_validation_target_gives_correlation_zero_without_a_warning(recwarn):
    module = TrajectorySumModule(
        resymnet_recipe(small := ReSymNetConfig(hidden=16, ensemble_size=2)), 5, small, [0, 1]
    )
    module.on_validation_epoch_start()
    batch = SegmentBatch(torch.randn(30, 5), torch.randint(0, 4, (30,)), torch.randn(4), torch.zeros(30))
    module.validation_step(batch, 0)

    class _Trainer:
        sanity_checking, should_stop, current_epoch = False, False, 0

    module.log_dict = lambda metrics, **kwargs: setattr(module, "_logged", metrics)
    module._trainer = _Trainer()
    module.on_validation_epoch_end()
    assert module.corr_history == [0.0] and float(module._logged["reward_fit/val_corr"]) == 0.0
    assert not [w for w in recwarn if "variance of predictions" in str(w.message)]
