"""ReSymNet's credit options (docs/method.md §4c): the length-normalised loss, the termination flag as an input
and return conservation; each is checked against a hand computation or through a fit that would not show it
if the option were read but ignored."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from prism.data.collect import collect_episodes, uniform_random_policy
from prism.data.segments import SegmentStore
from prism.envs import TOY_SPEC, make_env
from prism.reward import PredictedRewardShaper, make_shaper
from prism.reward.config import ReSymNetConfig
from prism.reward.conservation import conserve_segment_returns
from prism.reward.losses import NormalisedSumLoss, SumLoss, length_normalised_sum_loss
from prism.reward.model import RewardModelBase
from prism.reward.models.resymnet import ReSymNetEnsemble, ReSymNetRewardModel
from prism.reward.models.resymnet_fit import fit_resymnet_model

SMALL = dict(ensemble_size=1, hidden=32, max_epochs=80, patience=80, dropout=0.0, batch_size=16)


def _toy_store(episodes: int, seed: int, still: bool = False) -> SegmentStore:
    """Toy-env episodes (channel 0 sparse, p_rel = 0): a random policy's mostly terminate (the mass leaves the
    disc); a still policy's (zero action) run to the time limit and are truncated."""
    env = make_env(TOY_SPEC, sparse_channel=0, p_rel=0.0, seed=seed)
    store = SegmentStore(TOY_SPEC.obs_dim, TOY_SPEC.act_dim, TOY_SPEC.n_objectives - 1)
    policy = (lambda obs: np.zeros(TOY_SPEC.act_dim, np.float32)) if still else None
    policy = policy or uniform_random_policy(env.action_space, seed)
    collect_episodes(env, policy, episodes, store, 0, seed=seed)
    return store


# ---- 1. the normalised loss ---------------------------------------------------------------------------------


def test_normalised_loss_matches_a_hand_computation():
    # Two members, three segments of lengths 2, 3 and 1, then one padded step (id 3 = B).
    pred = torch.tensor([[1.0, 2.0, 0.5, 0.5, 1.0, 4.0, 9.0], [0.0, 1.0, 1.0, 1.0, 1.0, -2.0, 9.0]])
    ids = torch.tensor([[0, 0, 1, 1, 1, 2, 3]] * 2)
    targets = torch.tensor([[2.0, 1.0, 3.0], [1.0, 3.0, -2.0]])
    # member 0: sums 3, 2, 4 → ((3−2)²/2 + (2−1)²/3 + (4−3)²/1) / 3
    # member 1: sums 1, 3, −2 → (0 + 0 + 0) / 3
    expected = torch.tensor([(1 / 2 + 1 / 3 + 1.0) / 3, 0.0])
    torch.testing.assert_close(length_normalised_sum_loss(pred, ids, targets), expected)
    # eq. 1 on the same batch is not divided (guards against both being one function)
    assert not torch.allclose(SumLoss()(pred, _targets(ids, targets))["loss"], expected)


def _targets(ids, targets):
    from prism.reward.losses import LossTargets

    return LossTargets(ids, targets)


def test_the_normalised_loss_is_what_the_fit_trains_with():
    cfg = ReSymNetConfig(loss="normalised", **SMALL)
    assert isinstance(cfg.fit_loss(), NormalisedSumLoss)
    assert isinstance(ReSymNetConfig().fit_loss(), SumLoss)  # the paper's model keeps eq. 1
    # Two fits that differ in reward.loss only: an option read but ignored would give the same weights. Toy
    # episodes have very different lengths, so the two weightings lead to different fits.
    store = _toy_store(60, seed=1)
    small = dict(SMALL, max_epochs=5, patience=5)
    plain, _ = fit_resymnet_model(store, ReSymNetConfig(**small), seed=0)
    normalised, _ = fit_resymnet_model(store, ReSymNetConfig(loss="normalised", **small), seed=0)
    diff = (plain.predict(store.features) - normalised.predict(store.features)).abs().max()
    assert diff > 1e-3


# ---- 2. the termination flag -----------------------------------------------------------------------------


def test_the_flag_is_set_on_terminated_steps_only_never_on_truncated_ones():
    store = _toy_store(30, seed=0)
    store.extend(_toy_store(3, seed=5, still=True))  # truncated at the time limit
    flags = store.inputs(terminal=True)[:, -1]
    last = store.segment_offsets[1:] - 1
    from prism.data.segments import EPISODE_FINAL, TERMINATED

    final = (store.step_flags & EPISODE_FINAL) != 0
    terminated = (store.step_flags & TERMINATED) != 0
    assert bool(terminated.any()) and bool((final & ~terminated).any())  # both kinds of ending are present
    assert torch.equal(flags, terminated.float())
    assert float(flags[final & ~terminated].abs().sum()) == 0.0  # truncated last steps: 0
    not_last = torch.ones(len(store), dtype=torch.bool)
    not_last[last] = False
    assert float(flags[not_last].abs().sum()) == 0.0  # no step inside an episode


class _FlagProbe(RewardModelBase):
    """Predicts its last input column: the flag it was handed."""

    inputs = ReSymNetRewardModel(ReSymNetEnsemble(1, 5, hidden=4), terminal_feature=True).inputs

    def predict(self, features):
        return features[:, -1]

    def to_dict(self):
        return {}


def test_the_shaper_hands_the_model_the_envs_terminated_flag_never_truncated():
    shaper = PredictedRewardShaper(_FlagProbe(), 0)
    obs, act = np.zeros(TOY_SPEC.obs_dim, np.float32), np.zeros(TOY_SPEC.act_dim, np.float32)
    reward, w = np.zeros(2, np.float32), np.array([0.5, 0.5])
    cases = [(False, False, 0.0), (True, False, 1.0), (False, True, 0.0)]  # mid, terminated, truncated
    for terminated, truncated, expected in cases:
        (tr,) = shaper.push(obs, act, reward, obs, terminated, truncated, w, True)
        assert tr.reward[0] == expected
    # relabelling reads the replay's stored done (termination only) the same way
    from prism.reward import relabel_rewards

    done = torch.tensor([0.0, 1.0, 0.0])
    out = relabel_rewards(_FlagProbe(), torch.zeros(3, 6), torch.zeros(3, 2), torch.zeros(3, 2), 0, done=done)
    assert out[:, 0].tolist() == [0.0, 1.0, 0.0]


def _falling_store(n_episodes: int, seed: int) -> SegmentStore:
    """Episodes of 5..30 steps of uninformative features (obs 3, act 1, one dense column of noise). Every step
    rewards 1 except the step that terminates an episode (half of them terminate), which rewards 0 — the
    healthy bonus the MuJoCo walkers lose on their falling step. Only the termination flag tells that step."""
    g = torch.Generator().manual_seed(seed)
    store = SegmentStore(3, 1, 1)
    for _ in range(n_episodes):
        t = int(torch.randint(5, 31, (1,), generator=g))
        terminated = bool(torch.rand(1, generator=g) < 0.5)
        r = torch.ones(t)
        if terminated:
            r[-1] = 0.0
        released = torch.zeros(t, dtype=torch.bool)
        released[-1] = True
        emitted = torch.zeros(t)
        emitted[-1] = r.sum()
        store.add_episode(torch.randn(t, 5, generator=g), released, emitted, r, terminated=terminated)
    return store


def test_a_model_fitted_with_the_flag_predicts_the_falling_step():
    store = _falling_store(200, seed=0)
    model, _ = fit_resymnet_model(store, ReSymNetConfig(terminal_feature=True, **SMALL), seed=0)
    assert model.inputs.terminal
    pred = model.predict(model.inputs.of_store(store))
    falls = store.terminated_steps
    # The falling step's true reward is 0 and every other's 1: with the flag the fit tells them apart.
    assert abs(float(pred[falls].mean())) < 0.25, float(pred[falls].mean())
    assert abs(float(pred[~falls].mean()) - 1.0) < 0.1
    # saved and restored with the flag
    again = ReSymNetRewardModel.from_dict(model.to_dict())
    assert again.inputs.terminal and torch.equal(again.predict(again.inputs.of_store(store)), pred)


# ---- 3. return conservation -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_conservation_is_exact_in_sum_on_random_episodes(seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 1001, (20,), generator=g)
    ids = torch.repeat_interleave(torch.arange(20), lengths)
    values = torch.randn(len(ids), generator=g) * 3 + 1
    targets = torch.randn(20, generator=g) * 500
    out = conserve_segment_returns(values, ids, targets)
    sums = torch.zeros(20, dtype=torch.float64).index_add_(0, ids, out.double())
    torch.testing.assert_close(sums, targets.double(), rtol=1e-6, atol=1e-3)
    # a shape on top of R/T: within a segment the differences between steps are the model's
    shift = out - values
    for i in range(20):
        seg = shift[ids == i]
        torch.testing.assert_close(seg, seg[:1].expand_as(seg), rtol=0, atol=1e-4)
    # f ≡ 0 is the uniform redistribution R/T
    torch.testing.assert_close(
        conserve_segment_returns(torch.zeros_like(values), ids, targets), (targets / lengths)[ids]
    )


def _conserving_model(in_features: int) -> ReSymNetRewardModel:
    torch.manual_seed(0)
    model = ReSymNetRewardModel(ReSymNetEnsemble(2, in_features, hidden=16), conserve_return=True)
    with torch.no_grad():  # a non-trivial model (the real init predicts ≈ 0)
        model.net.out.weight.normal_()
    return model.eval()


@pytest.mark.parametrize("p_rel", [0.0, 0.2])
def test_the_shaper_conserves_each_released_segment_through_the_env(p_rel):
    model = _conserving_model(TOY_SPEC.obs_dim + TOY_SPEC.act_dim + 1)
    shaper = make_shaper("resymnet", sparse_channel=0, model=model)
    env = make_env(TOY_SPEC, sparse_channel=0, p_rel=p_rel, seed=3)
    rng = np.random.default_rng(3)
    obs, _ = env.reset(seed=3)
    segments = held = 0
    for _ in range(600):
        action = rng.uniform(-1, 1, 2).astype(np.float32)
        next_obs, reward, term, trunc, info = env.step(action)
        released = bool(info["released"][0])
        out = shaper.push(obs, action, reward, next_obs, term, trunc, np.array([0.5, 0.5]), released)
        held += 1
        if released:
            assert len(out) == held  # the whole segment, on its release step
            shaped = np.array([tr.reward[0] for tr in out], dtype=np.float64)
            raw = (
                model.predict(
                    model.features(
                        np.stack([tr.obs for tr in out]),
                        np.stack([tr.action for tr in out]),
                        np.stack([tr.reward for tr in out]),
                        0,
                    )
                )
                .double()
                .numpy()
            )
            assert np.isclose(shaped.sum(), float(reward[0]), rtol=1e-5, atol=1e-4)
            assert np.allclose(shaped - raw, (float(reward[0]) - raw.sum()) / held, atol=1e-4)
            segments, held = segments + 1, 0
        else:
            assert out == []
        obs = next_obs
        if term or trunc:
            obs, _ = env.reset()
    assert segments > 3
    # a checkpoint taken mid-segment gives the held steps back
    state = shaper.state_dict()
    restored = make_shaper("resymnet", sparse_channel=0, model=model)
    restored.load_state_dict(state)
    assert len(restored._pending) == held


def test_a_model_fitted_with_conservation_shapes_segments_to_their_returns():
    store = _falling_store(60, seed=1)
    model, _ = fit_resymnet_model(
        store, ReSymNetConfig(conserve_return=True, **dict(SMALL, max_epochs=3)), seed=0
    )
    assert model.conserves_return and ReSymNetRewardModel.from_dict(model.to_dict()).conserves_return
    shaper = make_shaper("resymnet", sparse_channel=0, model=model)
    first = slice(int(store.segment_offsets[0]), int(store.segment_offsets[1]))
    x, target = store.features[first].numpy(), float(store.targets[0])
    out = []
    for t in range(len(x)):
        reward = np.array([target if t == len(x) - 1 else 0.0, x[t, 4]], np.float32)
        out += shaper.push(
            x[t, :3], x[t, 3:4], reward, x[t, :3], False, False, np.ones(2) / 2, t == len(x) - 1
        )
    assert len(out) == len(x)
    assert np.isclose(sum(float(tr.reward[0]) for tr in out), target, rtol=1e-5, atol=1e-4)


# ---- the paper's model is unchanged -------------------------------------------------------------------------


def test_the_default_model_saves_and_shapes_as_before():
    model = ReSymNetRewardModel(ReSymNetEnsemble(1, 5, hidden=4))
    assert set(model.to_dict()) == {"hparams", "use_dense_features", "state"}
    assert not model.conserves_return and not model.inputs.terminal
    shaper = PredictedRewardShaper(model, 0)
    z = np.zeros(3, np.float32)
    out = shaper.push(
        z, np.zeros(1, np.float32), np.zeros(2, np.float32), z, False, False, np.ones(2) / 2, False
    )
    assert len(out) == 1 and shaper.state_dict() == {}  # one transition per step, nothing held


def test_bad_combinations_are_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"^reward\.relabel: must be false with reward\.conserve_return"):
        ReSymNetConfig(conserve_return=True, relabel=True)
    with pytest.raises(
        ValueError, match=r"^reward\.terminal_feature: must be false with reward\.stacked_fit"
    ):
        ReSymNetConfig(terminal_feature=True, stacked_fit=True)
    with pytest.raises(ValueError, match=r"^reward\.loss: must be one of sum, normalised, randomized"):
        ReSymNetConfig(loss="normalized_sum")
