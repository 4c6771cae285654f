"""Every per-member random stream of a population belongs to its member (issue #22).

A population's members are the independent seeds behind every confidence interval of a grid, so member s of
``seeds: [3, 4]`` must draw exactly what a single run with ``seed: s`` draws, and not what another member
draws: network initialisation, env resets, random actions, the sparse wrapper's release draws, training
preferences, replay indices, the random-redistribution shaper, the collections (random actions, resets,
releases, expert preferences and the expert's own networks), the reward fits (split, shuffles, init,
dropout) and the evaluation episodes.

Each test compares member 1 of a population ``[3, 4]`` with the single run ``seed: 4`` (equal) and with
member 0 (different). The update's policy noise is the one documented exception (drawn for the whole
population at once, docs/ARCHITECTURE.md), so nothing here runs an update: the streams are compared before
``learning_starts`` or directly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from toy_runs import toy_run

import prism.reward.fitting.fit as reward_module
from prism.config import load_config
from prism.data.segments import SegmentStore
from prism.envs.wrappers import SparseRewardWrapper
from prism.evaluation.pool import EvalEnvPool
from prism.run.fit import Run, build_run

CONF = Path(__file__).resolve().parents[1] / "conf"
POPULATION, SOLO = "seeds=[3,4]", "seed=4"
# p_rel > 0: the sparse wrapper's release draws decide what the buffer and the collected segments hold.
TOY = toy_run({"env.p_rel": 0.5, "eval.num_workers": 0})
TOY_OVERLAY = toy_run({"env.p_rel": 0.5, "eval.num_workers": 0}, resymnet=False)
RANDOM_STEPS = 60  # env steps taken, all before learning_starts (100): no update, no policy noise


def _build(tmp_path: Path, *overrides: str, files: tuple[str, ...] = ()) -> Run:
    config = load_config(
        [CONF / "quickstart.yaml", *(CONF / f for f in files)],
        # (a method overlay here has no reward model: ReSymNet's own keys are left out)
        [*(TOY_OVERLAY if files else TOY), f"run_dir={tmp_path / 'r'}", *overrides],
    )
    return build_run(config, progress_bar=False)


def _start(run: Run) -> Run:
    """What ``trainer.fit`` does to the agent before its first env step (envs, rings, generators, resets)."""
    run.agent.setup("fit")
    run.agent.on_fit_start()
    return run


def _release_state(env) -> dict:
    """The bit-generator state of the env's sparse wrapper (its release draws)."""
    while not isinstance(env, SparseRewardWrapper):
        env = env.env
    return env._rng.bit_generator.state


def _network_tensors(agent, member: int) -> list[torch.Tensor]:
    """Member ``member``'s slice of every actor and critic parameter (critics: ``n_critics`` rows each)."""
    n = agent.config.n_critics
    tensors = [p[member] for p in agent.actor.parameters()]
    tensors += [p[member * n : (member + 1) * n] for p in agent.critic.parameters()]
    return tensors


def _assert_member_is_solo_and_not_member_0(member_1, solo, member_0, what: str) -> None:
    assert torch.equal(member_1, solo), f"{what}: member 1 of [3, 4] differs from the run with seed 4"
    assert not torch.equal(member_1, member_0), f"{what}: members 0 and 1 of [3, 4] share it"


def test_member_init_envs_preferences_and_replay_are_the_solo_runs(tmp_path):
    """Before ``learning_starts`` every env step is drawn from per-member streams only: initial weights
    (``init``), the first reset (``env``), the random actions (``random_actions``), the sparse wrapper's
    release draws (the member's seed) and the training preferences (``preferences``). So member 1's replay
    ring after 60 steps is the seed-4 run's ring, row for row, and its replay batch (``replay``) is the
    seed-4 run's batch. Member 0 is given member 1's ring before the draw, so its batch can differ from
    member 1's only through its replay indices."""
    population = _start(_build(tmp_path, POPULATION, files=("method/baseline.yaml",)))
    solo = _start(_build(tmp_path, SOLO, files=("method/baseline.yaml",)))
    pop, one = population.agent, solo.agent
    assert pop.seeds == (3, 4) and one.seeds == (4,)

    for name, m1, s, m0 in zip(
        (n for n, _ in pop.named_parameters() if n.startswith(("actor.", "critic."))),
        _network_tensors(pop, 1),
        _network_tensors(one, 0),
        _network_tensors(pop, 0),
    ):
        if s.unique().numel() == 1:  # a constant initialisation (zero biases) is the same for every seed
            assert torch.equal(m1, s) and torch.equal(m0, s), name
        else:
            _assert_member_is_solo_and_not_member_0(m1, s, m0, f"initial weights {name}")
    obs = torch.as_tensor(pop._obs)
    _assert_member_is_solo_and_not_member_0(obs[1], torch.as_tensor(one._obs[0]), obs[0], "first reset")

    for _ in range(RANDOM_STEPS):
        pop.env_step()
        one.env_step()
    assert pop.learning_starts > RANDOM_STEPS and pop.n_updates == one.n_updates == 0
    weights = pop._weights_t
    _assert_member_is_solo_and_not_member_0(weights[1], one._weights_t[0], weights[0], "training preferences")
    assert _release_state(pop.envs[1]) == _release_state(one.envs[0]) != _release_state(pop.envs[0])

    ring, solo_ring = pop.buffer, one.buffer
    assert ring.sizes.tolist() == [RANDOM_STEPS, RANDOM_STEPS] and solo_ring.sizes.tolist() == [RANDOM_STEPS]
    rows, solo_rows = ring.storage[:, :RANDOM_STEPS], solo_ring.storage[0, :RANDOM_STEPS]
    # obs, action, reward (sparse channel as released), next_obs, terminated, preference: all of it
    _assert_member_is_solo_and_not_member_0(rows[1], solo_rows, rows[0], "replay ring contents")
    # the sparse channel as released is in the comparison: some steps released a sum, others nothing
    released = one.buffer.all(0).reward[:, pop.sparse_channel]
    assert 0 < int((released != 0).sum()) < RANDOM_STEPS

    ring.storage[0] = ring.storage[1]  # same contents: only the indices can tell the members' batches apart
    batch, solo_batch = pop.sample_batch(), one.sample_batch()
    for field, b, s in zip(batch._fields, batch, solo_batch):
        assert torch.equal(b[1], s[0]), f"replay batch {field}: member 1 of [3, 4] differs from seed 4"
    assert not torch.equal(batch.obs[1], batch.obs[0]), "replay indices: members 0 and 1 of [3, 4] share them"


def _store_tensors(store: SegmentStore) -> dict[str, torch.Tensor]:
    return {
        "features": store.features,
        "targets": store.targets,
        "true_sparse": store.true_sparse,
        "segment_offsets": store.segment_offsets,
    }


def _assert_stores(population: Run, solo: Run, what: str) -> None:
    member_1, alone, member_0 = (
        _store_tensors(population.loop.stores[1]),
        _store_tensors(solo.loop.stores[0]),
        _store_tensors(population.loop.stores[0]),
    )
    for key in alone:
        assert torch.equal(member_1[key], alone[key]), f"{what} {key}: member 1 of [3, 4] differs from seed 4"
    assert not torch.equal(member_1["features"], member_0["features"]), f"{what}: members 0 and 1 share it"


def test_member_collections_are_the_solo_runs(tmp_path):
    """The loop's collections draw from the member's ``collect/*`` streams: the random collection's actions,
    resets and release draws, then the expert collection's preferences, run with the member's own networks.
    So member 1's segment store equals the seed-4 run's after each collection, and differs from member 0's."""
    population, solo = _build(tmp_path, POPULATION), _build(tmp_path, SOLO)
    for random_policy, what in ((True, "random collection"), (False, "expert collection")):
        for run in (population, solo):
            run.loop._collect(run.agent, None, random_policy=random_policy)
        _assert_stores(population, solo, what)
    # the segments end at release draws as well as at episode ends: the release stream is in the comparison
    store = solo.loop.stores[0]
    assert store.num_segments > store.num_episodes


def _synthetic_store(n_segments: int = 40) -> SegmentStore:
    """Segments with toy-env feature widths (obs 6, action 2, one dense channel) and a known reward."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(2, 9, (n_segments,), generator=g)
    n = int(lengths.sum())
    x = torch.randn(n, 9, generator=g)
    r = x[:, 0] + 0.5 * x[:, 1] ** 2
    ends = torch.cumsum(lengths, 0) - 1
    released = torch.zeros(n, dtype=torch.bool)
    released[ends] = True
    emitted = torch.zeros(n)
    emitted[ends] = torch.zeros(n_segments).index_add_(
        0, torch.repeat_interleave(torch.arange(n_segments), lengths), r
    )
    store = SegmentStore(6, 2, 1)
    store.add_episode(x, released, emitted, r)
    return store


def test_member_reward_fits_draw_the_solo_runs_split_shuffles_init_and_dropout(tmp_path, monkeypatch):
    """Every member is fitted on one and the same store here, so only the fit's seed streams can tell the
    fits apart: member 1's train/validation split, its ensemble's shuffle orders and initialisation seeds,
    and (through the fitted weights) its dropout masks must be the seed-4 run's, and not member 0's."""
    data_modules: list = []

    class RecordingDataModule(reward_module.TrajectorySumDataModule):
        def setup(self, stage=None):
            super().setup(stage)
            if self not in data_modules:
                data_modules.append(self)

    dropout_streams: list[torch.Tensor] = []

    class RecordingModule(reward_module.TrajectorySumModule):
        def on_train_start(self):
            # the global generator where the fit's dropout masks start (the fit seeds it)
            dropout_streams.append(torch.get_rng_state())

    monkeypatch.setattr(reward_module, "TrajectorySumDataModule", RecordingDataModule)
    monkeypatch.setattr(reward_module, "TrajectorySumModule", RecordingModule)
    store = _synthetic_store()
    fitted = []
    for overrides in (POPULATION, SOLO):
        run = _build(tmp_path, overrides, "reward.max_epochs=2")
        run.loop.stores = [store] * run.agent.members
        run.loop._fit(run.agent, None)
        assert [shaper.model for shaper in run.agent.shapers] == run.loop.models  # installed where used
        fitted.extend(run.loop.models)
        assert all(
            fits[-1]["epochs_run"] == [2, 2, 2] for fits in run.loop.state.reward_fits
        )  # real fits, dropout and all
    member_0, member_1, alone = fitted
    dm_0, dm_1, dm_alone = data_modules

    for name, value in (
        ("validation split", lambda dm: dm.val_segments),
        ("shuffle seeds", lambda dm: torch.tensor(dm.shuffle_seeds)),
    ):
        _assert_member_is_solo_and_not_member_0(value(dm_1), value(dm_alone), value(dm_0), name)
    init = [torch.tensor(model.net.member_seeds) for model in fitted]
    _assert_member_is_solo_and_not_member_0(init[1], init[2], init[0], "initialisation seeds")
    dropout_0, dropout_1, dropout_alone = dropout_streams
    _assert_member_is_solo_and_not_member_0(dropout_1, dropout_alone, dropout_0, "dropout stream")
    state_0, state_1, state_alone = (model.state_dict() for model in fitted)
    for key in state_alone:
        torch.testing.assert_close(state_1[key], state_alone[key], rtol=0, atol=0, msg=key)
    assert not torch.equal(state_1["net.inp.weight"], state_0["net.inp.weight"])


def test_member_evaluation_episodes_are_the_solo_runs(tmp_path, monkeypatch):
    """Member m's evaluation callback resets its episodes from the member's ``eval`` stream and rolls out
    member m's policy: member 1's reset seeds and returns are the seed-4 run's, member 0's are not."""
    seen: list[int] = []
    original = EvalEnvPool.reset

    def recording_reset(pool, seeds):
        seen.extend(seeds)
        return original(pool, seeds)

    monkeypatch.setattr(EvalEnvPool, "reset", recording_reset)
    population, solo = _build(tmp_path, POPULATION), _build(tmp_path, SOLO)
    outcomes = []
    for run, member in ((population, 0), (population, 1), (solo, 0)):
        evaluation = run.members[member].evaluation
        seen.clear()
        result = evaluation._rollout(run.agent, evaluation.config)
        evaluation._pool.close()
        outcomes.append((torch.tensor(seen), torch.as_tensor(result.returns)))
    (seeds_0, returns_0), (seeds_1, returns_1), (seeds_alone, returns_alone) = outcomes
    _assert_member_is_solo_and_not_member_0(seeds_1, seeds_alone, seeds_0, "evaluation reset seeds")
    _assert_member_is_solo_and_not_member_0(returns_1, returns_alone, returns_0, "evaluation returns")


def test_member_random_redistribution_streams_are_the_solo_runs(tmp_path):
    """The ``random`` ablation's shaper draws its α_t from a generator of the member's own seed."""
    population = _build(tmp_path, POPULATION, files=("ablation/random.yaml",))
    solo = _build(tmp_path, SOLO, files=("ablation/random.yaml",))

    def draws(shaper) -> torch.Tensor:
        return torch.as_tensor(shaper._rng.random(16))

    member_0, member_1, alone = (draws(s) for s in (*population.agent.shapers, *solo.agent.shapers))
    _assert_member_is_solo_and_not_member_0(member_1, alone, member_0, "random redistribution draws")


def test_the_random_redistribution_stream_is_no_other_seeds_release_stream():
    """The ``random`` shaper of seed s and the sparse wrapper of seed s + 1 once drew the same numbers (both
    ``default_rng(s + 1)``): runs of neighbouring seeds were not independent. Their first draws must differ."""
    from prism.config import resolve_env_spec
    from prism.envs import make_env
    from prism.run.fit import build_shaper

    config = load_config([CONF / "quickstart.yaml"], ["reward.name=random", "env.id=prism/Toy-v0"])
    spec = resolve_env_spec(config)
    for seed in (0, 3):
        shaper_draws = build_shaper(config, 0, seed)._rng.random(8)
        env = make_env(spec, sparse_channel=0, p_rel=0.5, seed=seed + 1)
        while not isinstance(env, SparseRewardWrapper):
            env = env.env
        assert not np.allclose(shaper_draws, env._rng.random(8))
        # and the stream is still the member's own: the same seed gives the same draws
        assert np.array_equal(build_shaper(config, 0, seed)._rng.random(8), shaper_draws)
