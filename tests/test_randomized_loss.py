"""The reward fit's cheaper options (``reward.loss: randomized``, ``reward.precision``, ``reward.warm_start``):
randomized return decomposition is eq. 1 exactly when every step is kept, its expectation is eq. 1 plus the
closed-form variance of the sampled sum (the bias-corrected form: eq. 1 itself), its sample is uniform without
replacement and seeded, and a randomized fit is deterministic and resumes bit for bit."""

from __future__ import annotations

import io

import pytest
import torch
from segment_stores import synthetic_store

import prism.reward.fitting.fit as reward_module
from prism.config import ConfigError, load_config
from prism.data.datamodule import StepSampler, TrajectorySumDataModule, gather_segments, sample_segment_steps
from prism.reward.config import ReSymNetConfig, RRDRewardConfig
from prism.reward.losses import randomized_sum_loss, segment_sums, trajectory_sum_loss
from prism.reward.models.resymnet_fit import fit_resymnet_model

SMALL = dict(ensemble_size=3, hidden=16, max_epochs=6, patience=3, batch_size=8, dropout=0.1)


def _batch(lengths: list[int], members: int = 2, seed: int = 0):
    """Per-step predictions, segment ids and targets of ``members`` rows of segments of ``lengths``."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)).expand(members, -1)
    pred = torch.randn(members, sum(lengths), generator=g, dtype=torch.float64)
    targets = torch.randn(members, len(lengths), generator=g, dtype=torch.float64) * 5
    return pred, ids.contiguous(), targets


@pytest.mark.parametrize("bias_correction", [False, True])
def test_keeping_every_step_is_eq1_bit_for_bit(bias_correction):
    lengths = [3, 7, 1, 12]
    pred, ids, targets = _batch(lengths)
    t = torch.tensor(lengths).expand(2, -1)
    a = pred.clone().requires_grad_()
    b = pred.clone().requires_grad_()
    eq1 = trajectory_sum_loss(a, ids, targets)
    randomized = randomized_sum_loss(b, ids, targets, t, t, bias_correction=bias_correction)
    assert torch.equal(eq1, randomized)
    eq1.sum().backward()
    randomized.sum().backward()
    assert torch.equal(a.grad, b.grad)


def test_a_fit_whose_k_covers_every_segment_is_the_eq1_fit_bit_for_bit():
    """K ≥ the longest segment: the randomized fit trains on the same batches and weights as eq. 1's."""
    store = synthetic_store(40, seed=3, max_length=9)
    eq1 = fit_resymnet_model(store, ReSymNetConfig(**SMALL), seed=2)
    rrd = fit_resymnet_model(store, ReSymNetConfig(**SMALL, loss="randomized", sampled_steps=9), seed=2)
    for (name, p), q in zip(eq1.model.named_parameters(), rrd.model.parameters(), strict=True):
        assert torch.equal(p, q), name
    assert eq1.summary.best_val_loss == rrd.summary.best_val_loss
    # ... and a smaller K trains on other steps, so other weights
    small_k = fit_resymnet_model(store, ReSymNetConfig(**SMALL, loss="randomized", sampled_steps=3), seed=2)
    assert not torch.equal(small_k.model.net.inp.weight, eq1.model.net.inp.weight)


def _draw_losses(lengths, k, draws, bias_correction):
    """Loss of each of ``draws`` samples of K steps per segment, one fixed model (fixed r̂ per step): one call
    of the sampler, row m of the selection being draw m."""
    g = torch.Generator().manual_seed(11)
    r_hat = torch.randn(sum(lengths), generator=g, dtype=torch.float64) * 2 + 0.5
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(torch.tensor(lengths), 0)])
    targets = torch.tensor([3.0, -2.0, 10.0, 0.5][: len(lengths)], dtype=torch.float64)
    selection = torch.arange(len(lengths)).expand(draws, -1)
    rows, ids, valid, counts = sample_segment_steps(offsets, selection, k, torch.Generator().manual_seed(5))
    pred = torch.where(valid, r_hat[rows], 0.0)
    t = (offsets[1:] - offsets[:-1]).expand(draws, -1)
    losses = randomized_sum_loss(pred, ids, targets.expand(draws, -1), t, counts, bias_correction)
    return losses, r_hat, offsets, targets


def test_the_plain_loss_is_eq1_plus_the_sampled_sums_variance_in_expectation():
    lengths, k = [20, 9, 5, 30], 4
    losses, r_hat, offsets, targets = _draw_losses(lengths, k, 20_000, bias_correction=False)
    expected = 0.0
    for i, t in enumerate(lengths):
        seg = r_hat[offsets[i] : offsets[i + 1]]
        kk = min(k, t)
        # finite-population variance of (T/K)·Σ of K of T values drawn without replacement
        variance = t**2 * (1 - kk / t) * seg.var(unbiased=True) / kk
        expected += (seg.sum() - targets[i]) ** 2 + variance
    expected /= len(lengths)
    se = losses.std() / len(losses) ** 0.5
    assert abs(losses.mean() - expected) < 4 * se
    eq1 = torch.stack(
        [(r_hat[offsets[i] : offsets[i + 1]].sum() - targets[i]) ** 2 for i in range(len(lengths))]
    ).mean()
    assert expected - eq1 > 20 * se  # the variance term is far from negligible here


def test_the_bias_corrected_loss_is_eq1_in_expectation():
    lengths, k = [20, 9, 5, 30], 4
    losses, r_hat, offsets, targets = _draw_losses(lengths, k, 20_000, bias_correction=True)
    eq1 = torch.stack(
        [(r_hat[offsets[i] : offsets[i + 1]].sum() - targets[i]) ** 2 for i in range(len(lengths))]
    ).mean()
    se = losses.std() / len(losses) ** 0.5
    assert abs(losses.mean() - eq1) < 4 * se


def test_the_sample_is_min_k_t_distinct_steps_of_each_segment_redrawn_and_seeded():
    lengths = torch.tensor([10, 3, 64, 200, 1])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)])
    selection = torch.tensor([[0, 1, 2, 3, 4], [4, 3, 2, 1, 0]])
    stream = torch.Generator().manual_seed(0)
    rows, ids, valid, counts = sample_segment_steps(offsets, selection, 8, stream)
    assert torch.equal(counts, lengths[selection].clamp(max=8))
    for m in range(2):
        for b in range(5):
            seg = int(selection[m, b])
            picked = rows[m][valid[m] & (ids[m] == b)]
            assert len(picked) == min(8, int(lengths[seg]))
            assert len(set(picked.tolist())) == len(picked)  # without replacement
            assert bool(((picked >= offsets[seg]) & (picked < offsets[seg + 1])).all())  # inside the segment
            assert torch.equal(picked, picked.sort().values)  # in time order
    short = gather_segments(offsets, selection[:1, 1:2])  # a 3-step segment: every step, as eq. 1 has it
    again = sample_segment_steps(offsets, selection[:1, 1:2], 8, stream)
    assert torch.equal(again[0], short[0]) and torch.equal(again[1], short[1])
    # redrawn from the stream on every call, and the same from the same seed
    second = sample_segment_steps(offsets, selection, 8, stream)
    assert not torch.equal(second[0], rows)
    replay = sample_segment_steps(offsets, selection, 8, torch.Generator().manual_seed(0))
    assert torch.equal(replay[0], rows)
    # every step of a long segment is drawn equally often (uniform)
    hits = torch.zeros(200)
    for _ in range(2000):
        r, i, v, _ = sample_segment_steps(offsets, selection[:1, 3:4], 8, stream)
        hits[r[0][v[0]] - offsets[3]] += 1
    assert hits.min() > 0.5 * hits.mean() and hits.max() < 1.5 * hits.mean()


def test_validation_batches_hold_whole_segments_and_training_batches_the_sample():
    store = synthetic_store(30, seed=1, max_length=20)
    dm = TrajectorySumDataModule(
        store, batch_size=4, n_members=2, seed=0, ragged=True, sampler=StepSampler(5)
    )
    dm.setup()
    lengths = dm.offsets[1:] - dm.offsets[:-1]
    for batch in dm.val_dataloader():
        assert batch.sampled_steps is None
        assert len(batch.segment_ids) == int(segment_sums(torch.ones(len(batch.segment_ids)), batch.segment_ids, len(batch.targets)).sum())  # fmt: skip
    val_steps = sum(len(b.segment_ids) for b in dm.val_dataloader())
    assert val_steps == int(lengths[dm.val_segments].sum())
    batches = list(dm.train_dataloader())
    for batch in batches:
        assert batch.steps == tuple(batch.sampled_steps.sum(dim=1).tolist())
        assert bool((batch.sampled_steps == batch.segment_lengths.clamp(max=5)).all())
    # the draw-ahead step counts (the dropout noise's shapes) are the next batch's
    assert [b.next_steps for b in batches[:-1]] == [b.steps for b in batches[1:]]


def _fit_rrd(**kwargs):
    store = synthetic_store(60, seed=1, max_length=30)
    config = ReSymNetConfig(
        **{**SMALL, "max_epochs": 8}, loss="randomized", sampled_steps=6, bias_correction=True
    )
    return fit_resymnet_model(store, config, seed=5, **kwargs)


def test_a_randomized_fit_is_deterministic_and_resumes_bit_for_bit():
    snapshots: list[bytes] = []
    whole = _fit_rrd(on_snapshot=snapshots.append, snapshot_every_s=0)
    again = _fit_rrd()
    resumed = _fit_rrd(resume=snapshots[len(snapshots) // 2])
    assert torch.load(io.BytesIO(snapshots[len(snapshots) // 2]), weights_only=False)["epoch"] >= 1
    for other in (again, resumed):
        for (name, p), q in zip(whole.model.named_parameters(), other.model.parameters(), strict=True):
            assert torch.equal(p, q), name
        assert other.summary.best_val_loss == whole.summary.best_val_loss


@pytest.mark.slow
def test_randomized_fit_recovers_the_hidden_reward():
    """On long segments (T up to 60, K = 8) the per-step prediction still finds r = x0 + 0.5·x1²."""
    store = synthetic_store(400, seed=4, max_length=60, dense=False)
    config = ReSymNetConfig(
        ensemble_size=2, hidden=64, max_epochs=60, patience=15, batch_size=16, dropout=0.0, lr=0.003,
        use_dense_features=False, loss="randomized", sampled_steps=8, bias_correction=False,
    )  # fmt: skip
    model = fit_resymnet_model(store, config, seed=0)
    # (eq. 1 reaches 0.95 here in 60 epochs; K = 8 of up to 60 steps is a noisier gradient: 0.83)
    assert model.summary.val_correlation > 0.8


@pytest.mark.parametrize(
    "override, key",
    [
        ("reward.loss=rrd", "reward.loss"),
        ("reward.sampled_steps=0", "reward.sampled_steps"),
        ("reward.precision=16-mixed", "reward.precision"),
    ],
)
def test_bad_fit_options_are_refused_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=f"^{key}"):
        load_config(["conf/quickstart.yaml"], [override])


def test_bias_correction_needs_two_sampled_steps_and_the_stacked_fit_refuses_what_it_lacks():
    with pytest.raises(ValueError, match="^reward.sampled_steps: must be >= 2 with bias_correction"):
        ReSymNetConfig(loss="randomized", sampled_steps=1, bias_correction=True)
    with pytest.raises(ValueError, match="^reward.loss: must be sum with reward.stacked_fit=true"):
        ReSymNetConfig(loss="randomized", stacked_fit=True)
    with pytest.raises(ValueError, match="^reward.warm_start: must be false with reward.stacked_fit=true"):
        ReSymNetConfig(warm_start=True, stacked_fit=True)
    with pytest.raises(
        ValueError, match="^reward.bias_correction: must be false with reward.sampling=stratified"
    ):
        ReSymNetConfig(loss="randomized", sampling="stratified", bias_correction=True)
    with pytest.raises(ValueError, match="^reward.sampling: must be one of uniform, stratified"):
        ReSymNetConfig(sampling="systematic")


def test_bias_correction_defaults_to_each_models_own_form_however_the_method_is_chosen():
    """``null`` resolves per model: on for ReSymNet (the benchmark's better form), off for RRD (its paper's plain
    loss), the same whether rrd comes from its overlay or from ``reward.name=rrd``; an explicit value wins."""
    assert ReSymNetConfig().bias_correction is None and ReSymNetConfig().bias_corrected
    assert not RRDRewardConfig(name="rrd").bias_corrected
    assert RRDRewardConfig(name="rrd", bias_correction=True).bias_corrected
    assert not ReSymNetConfig(loss="randomized", bias_correction=False).bias_corrected
    overlay = load_config(["conf/walker.yaml", "conf/method/rrd.yaml"])
    override = load_config(["conf/walker.yaml"], ["reward.name=rrd"])
    assert not overlay.reward.bias_corrected and not override.reward.bias_corrected
    assert load_config(["conf/walker.yaml"], ["reward.loss=randomized"]).reward.bias_corrected
    # the default is on, so stratified sampling needs it off: refused where the randomized loss runs (saying
    # what to add), accepted under eq. 1 (where neither applies) and once it is off
    with pytest.raises(
        ConfigError, match=r"^reward.bias_correction: .*\(add reward.bias_correction=false\)$"
    ):
        load_config(["conf/walker.yaml"], ["reward.loss=randomized", "reward.sampling=stratified"])
    assert load_config(["conf/walker.yaml"], ["reward.sampling=stratified"]).reward.loss == "sum"
    assert not ReSymNetConfig(loss="randomized", sampling="stratified", bias_correction=False).bias_corrected
    with pytest.raises(ValueError, match="^reward.bias_correction: must be true, false or null"):
        ReSymNetConfig(bias_correction="yes")


def test_bf16_is_refused_in_one_line_where_the_cpu_lacks_it(monkeypatch):
    monkeypatch.setattr(reward_module, "bf16_supported", lambda device: False)
    with pytest.raises(ValueError, match="^reward.precision: bf16-mixed needs native bfloat16"):
        fit_resymnet_model(synthetic_store(10), ReSymNetConfig(**SMALL, precision="bf16-mixed"))
    with pytest.raises(ConfigError, match="^reward.precision: bf16-mixed needs native bfloat16"):
        load_config(["conf/quickstart.yaml"], ["reward.precision=bf16-mixed", "device=cpu"])


def test_a_bf16_fit_autocasts_its_matmuls_and_keeps_float32_weights(monkeypatch):
    """Where bf16 is allowed (forced here: emulated on a CPU without it) the fit's matmuls run in bfloat16:
    other weights than the float32 fit's (which repeats bit for bit), float32 parameters, and a model of
    about the same quality."""
    monkeypatch.setattr(reward_module, "bf16_supported", lambda device: True)
    store = synthetic_store(80, seed=2, max_length=12)
    config = dict(SMALL, max_epochs=10, dropout=0.0, patience=10)
    fp32 = fit_resymnet_model(store, ReSymNetConfig(**config), seed=1)
    assert torch.equal(
        fit_resymnet_model(store, ReSymNetConfig(**config), seed=1).model.net.inp.weight,
        fp32.model.net.inp.weight,
    )
    for layout in ("ragged", "padded"):
        bf16 = fit_resymnet_model(
            store, ReSymNetConfig(**config, precision="bf16-mixed"), seed=1, layout=layout
        )
        assert all(p.dtype == torch.float32 for p in bf16.model.parameters())
        assert not torch.equal(bf16.model.net.inp.weight, fp32.model.net.inp.weight)
        assert abs(bf16.summary.val_correlation - fp32.summary.val_correlation) < 0.05


def test_a_warm_started_fit_begins_from_the_given_members():
    store = synthetic_store(40, seed=3, max_length=9)
    first = fit_resymnet_model(store, ReSymNetConfig(**SMALL), seed=2)
    frozen = dict(SMALL, lr=1e-30, weight_decay=0.0, max_epochs=1)
    warm = fit_resymnet_model(store, ReSymNetConfig(**frozen, warm_start=True), seed=9, init=first.model)
    cold = fit_resymnet_model(store, ReSymNetConfig(**frozen, warm_start=True), seed=9)
    # (the scaler is refitted, the weights are the first fit's; at lr ≈ 0 they do not move)
    assert torch.allclose(warm.model.net.inp.weight, first.model.net.inp.weight, atol=1e-6)
    assert not torch.allclose(cold.model.net.inp.weight, first.model.net.inp.weight, atol=1e-3)


def test_the_stratified_sample_draws_every_step_with_probability_k_over_t_and_spreads_over_the_segment():
    """One step per stratum of T/K: inclusion K/T for every step (so (T/K)·Σ is unbiased), one pick in each
    stratum, time order; a segment no longer than K keeps every step; far less variance on a smooth reward."""
    lengths = torch.tensor([100, 37, 5])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)])
    draws, k = 20_000, 8
    selection = torch.arange(3).expand(draws, -1)
    stream = torch.Generator().manual_seed(3)
    rows, ids, valid, counts = sample_segment_steps(offsets, selection, k, stream, stratified=True)
    assert torch.equal(counts[0], torch.tensor([8, 8, 5]))
    for seg, t in enumerate(lengths.tolist()):
        picked = rows[valid & (ids == seg)].reshape(draws, -1) - offsets[seg]
        if t <= k:
            assert bool((picked == torch.arange(t)).all())
            continue
        j = torch.arange(k, dtype=torch.float64)
        # pick j lies in stratum j's real interval [j·T/K, (j+1)·T/K), as an integer step
        assert bool((picked >= (j * t / k).floor()).all() and (picked <= ((j + 1) * t / k).ceil() - 1).all())
        assert bool((picked.diff(dim=1) >= 0).all())
        frequency = torch.bincount(picked.flatten(), minlength=t) / draws
        assert torch.allclose(frequency, torch.full((t,), k / t), atol=4 * (k / t / draws) ** 0.5)
    # unbiased, and on a smooth reward (a ramp) a much smaller variance than the uniform sample's
    ramp = torch.linspace(0, 1, 100, dtype=torch.float64)
    first = selection[:, :1]
    estimates = {}
    for stratified in (False, True):
        r, i, v, _ = sample_segment_steps(offsets, first, k, torch.Generator().manual_seed(4), stratified)
        estimates[stratified] = 100 / k * torch.where(v, ramp[r.clamp(max=99)], 0.0).sum(dim=1)
    for est in estimates.values():
        assert abs(est.mean() - ramp.sum()) < 4 * est.std() / draws**0.5
    assert estimates[True].var() < 0.05 * estimates[False].var()


def test_the_configs_sampling_reaches_resymnets_fit():
    """``reward.sampling`` is what ReSymNet's randomized fit draws its K steps with: the fit's data module
    samples stratified when the config says so (uniform otherwise, and nothing under eq. 1), and the two
    samplings train on other steps, so other weights, from the same seed."""
    from lightning.pytorch.callbacks import Callback

    class Sampling(Callback):  # what the fit's own data module was built with
        def on_train_start(self, trainer, pl_module):
            sampler = trainer.datamodule.sampler
            self.seen = (None, False) if sampler is None else (sampler.steps, sampler.stratified)

    store = synthetic_store(40, seed=3, max_length=12)
    fits = {}
    for loss, sampling, expected in (
        ("randomized", "stratified", (4, True)),
        ("randomized", "uniform", (4, False)),
        ("sum", "stratified", (None, False)),  # (eq. 1 has no sampler: the key is inert)
    ):
        config = ReSymNetConfig(
            **{**SMALL, "max_epochs": 2}, loss=loss, sampled_steps=4, sampling=sampling, bias_correction=False
        )
        seen = Sampling()
        fits[loss, sampling] = fit_resymnet_model(store, config, seed=2, callbacks=[seen])
        assert seen.seen == expected, (loss, sampling)
    stratified, uniform = fits["randomized", "stratified"], fits["randomized", "uniform"]
    assert not torch.equal(stratified.model.net.inp.weight, uniform.model.net.inp.weight)


def test_a_null_bias_correction_fits_resymnet_corrected_bit_for_bit():
    """``reward.bias_correction: null`` is on for ReSymNet's randomized loss: the fit equals the ``true`` fit
    bit for bit and differs from the ``false`` one (a null passed through raw would train uncorrected)."""
    store = synthetic_store(40, seed=4, max_length=24)
    fits = {
        setting: fit_resymnet_model(
            store,
            ReSymNetConfig(**SMALL, loss="randomized", sampled_steps=4, bias_correction=setting),
            seed=3,
        ).model
        for setting in (None, True, False)
    }
    for (name, p), q in zip(fits[None].named_parameters(), fits[True].parameters(), strict=True):
        assert torch.equal(p, q), name
    assert not all(torch.equal(p, r) for p, r in zip(fits[None].parameters(), fits[False].parameters()))


@pytest.mark.parametrize("warm_start", [False, True])
def test_a_runs_refit_starts_fresh_by_default_and_from_each_members_last_model_under_warm_start(
    warm_start, tmp_path, monkeypatch
):
    """A two-cycle toy run, the weights of each fit taken as its Trainer starts and as it ends: a default run
    refits from the fresh initialisation of the refit's seeds (as its first fit starts); ``reward.warm_start``
    hands the refit the previous fit's model."""
    from pathlib import Path

    from toy_runs import toy_run

    from prism.reward.fitting.fit import ensemble_seeds
    from prism.run.fit import fit_run

    fits: list[dict] = []
    original = reward_module.run_fit_trainer

    def spy(module, datamodule, config, device, logger, callbacks, resume, *, seed=None):
        fresh = module.recipe.network(datamodule.in_features, ensemble_seeds(seed, module.n_members))
        start = {n: p.detach().clone() for n, p in module.net.state_dict().items()}
        original(module, datamodule, config, device, logger, callbacks, resume, seed=seed)
        end = {n: p.detach().clone() for n, p in module.net.state_dict().items()}
        fits.append({"fresh": fresh.state_dict(), "start": start, "end": end})

    monkeypatch.setattr(reward_module, "run_fit_trainer", spy)
    conf = Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml"
    overrides = toy_run({"reward.warm_start": str(warm_start).lower(), "figures": "false"})
    fit_run([str(conf)], [*overrides, f"run_dir={tmp_path / 'run'}"])

    def same(a: dict, b: dict) -> bool:
        return all(torch.equal(a[n], b[n]) for n in a)

    assert len(fits) == 2
    assert same(fits[0]["start"], fits[0]["fresh"])  # the first fit starts fresh either way
    assert not same(fits[0]["end"], fits[0]["start"]) and not same(fits[1]["fresh"], fits[0]["end"])
    refit = fits[1]
    assert same(refit["start"], fits[0]["end"]) is warm_start
    assert same(refit["start"], refit["fresh"]) is not warm_start
