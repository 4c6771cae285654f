"""No random stream of a run is seeded with the raw run seed or a small offset of it.

``numpy.random.default_rng(s)`` and ``env.reset(seed=s)`` give the same stream for the same integer ``s``
(gymnasium seeds an env with ``PCG64(SeedSequence(s))``). So two consumers seeded with the raw run seed draw the
same numbers, and a consumer seeded with ``seed + k`` draws what another run's raw-seeded consumer draws (run
``seed + k``): the members of a grid would share draws. Every consumer must instead take a named stream of the
run seed (``prism.core.seeding.derive_seed``), which lands anywhere in ``[0, 2**32)``.

Each test records the initial state of every numpy generator a run creates and every seed an env is reset
with (except the evaluation weight sets, fixed on purpose: :data:`FIXED_ON_PURPOSE`), while the run is built, started and (GPI-PD) runs one GPI-LS evaluation, then checks by brute force
that none of them is the stream of a small integer ``k < 20 000`` — the raw seeds of any grid and the offsets
``seed + k`` that code writes by hand (GPI-PD's eval env used ``seed + 7919``).
"""

from __future__ import annotations

import traceback
from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils import seeding
from toy_runs import toy_run

from prism.config import load_config
from prism.run.fit import Run, build_run

CONF = Path(__file__).resolve().parents[1] / "conf"
SMALL_INTEGERS = 20_000
# p_rel > 0, so the sparse wrapper's release draws matter; the baseline method keeps the wrapper (and has no
# reward model: ReSymNet's own keys are left out, resymnet=False).
CAPQL_TOY = toy_run({"env.p_rel": 0.5, "eval.num_workers": 0}, resymnet=False)
GPI_PD_TOY = toy_run(
    {
        "env.p_rel": 0.5,
        "eval.num_workers": 0,
        "agent.actor_hidden": None,
        "agent.critic_hidden": None,
        "agent.name": "gpi_pd",
        "agent.net_arch": "[32,32]",
        "agent.dynamics_net_arch": "[32,32]",
        "agent.eval_episodes_per_weight": 1,
    },
    resymnet=False,
)


def _state_key(generator: np.random.Generator) -> tuple[int, int]:
    state = generator.bit_generator.state["state"]
    return int(state["state"]), int(state["inc"])


def _small_integer_streams() -> dict[tuple[int, int], int]:
    """The initial PCG64 state of ``default_rng(k)`` (= ``env.reset(seed=k)``'s) for every k < SMALL_INTEGERS."""
    return {_state_key(np.random.default_rng(k)): k for k in range(SMALL_INTEGERS)}


@pytest.fixture(scope="module")
def small_integer_streams() -> dict[tuple[int, int], int]:
    return _small_integer_streams()


FIXED_ON_PURPOSE = ("prism/metrics/functional.py",)
"""Where fixed-seed draws are the protocol: the evaluation weight sets (pymoo's energy directions, the EUM
preferences; seed 42, as morl-baselines) are the same for every run, so that runs are compared on the same
weights."""


def _fixed_on_purpose() -> bool:
    return any(frame.filename.endswith(FIXED_ON_PURPOSE) for frame in traceback.extract_stack())


class StreamRecorder:
    """Records the initial state of every ``numpy.random.default_rng`` generator and every env seed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.streams: list[tuple[str, tuple[int, int]]] = []
        self.initial: dict[int, tuple[int, int]] = {}  # id(generator) -> its initial state
        default_rng, np_random = np.random.default_rng, seeding.np_random

        def recording_default_rng(seed=None):
            generator = default_rng(seed)
            if _fixed_on_purpose():
                return generator
            self.streams.append((f"default_rng({seed!r})", _state_key(generator)))
            self.initial[id(generator)] = _state_key(generator)
            return generator

        def recording_np_random(seed=None):
            generator, entropy = np_random(seed)
            self.streams.append((f"env.reset(seed={seed!r})", _state_key(generator)))
            return generator, entropy

        monkeypatch.setattr(np.random, "default_rng", recording_default_rng)
        monkeypatch.setattr(seeding, "np_random", recording_np_random)


def _build_and_start(tmp_path: Path, overrides: list[str], *files: str) -> Run:
    config = load_config(
        [CONF / "quickstart.yaml", *(CONF / f for f in files)],
        [*overrides, "seed=4", f"run_dir={tmp_path / 'r'}"],
    )
    run = build_run(config, progress_bar=False)
    run.agent.setup("fit")
    run.agent.on_fit_start()
    return run


def _raw_seeded(recorder: StreamRecorder, small: dict[tuple[int, int], int]) -> list[str]:
    return [f"{where} is default_rng({small[key]})" for where, key in recorder.streams if key in small]


def test_capql_run_streams_are_named_streams_of_the_seed(tmp_path, monkeypatch, small_integer_streams):
    recorder = StreamRecorder(monkeypatch)
    run = _build_and_start(tmp_path, CAPQL_TOY, "method/baseline.yaml")
    for _ in range(5):
        run.agent.env_step()
    kinds = {where.split("(")[0] for where, _ in recorder.streams}
    assert kinds == {"default_rng", "env.reset"}, recorder.streams  # the recorder saw the wrapper and the env
    assert _raw_seeded(recorder, small_integer_streams) == []


def test_gpi_pd_run_streams_are_named_streams_of_the_seed(tmp_path, monkeypatch, small_integer_streams):
    recorder = StreamRecorder(monkeypatch)
    run = _build_and_start(tmp_path, GPI_PD_TOY, "method/baseline.yaml")
    agent = run.agent
    n_before = len(recorder.streams)
    agent._evaluate(np.eye(agent.spec.n_objectives)[0], gpi=False)  # creates and seeds GPI-LS's eval env
    assert len(recorder.streams) > n_before, "the GPI-LS eval env was not created"
    assert _raw_seeded(recorder, small_integer_streams) == []
    # GPI-PD's own streams are three different ones: GPI-LS tie-breaking, the preferences, the eval env's resets
    eval_resets = [key for where, key in recorder.streams[n_before:] if where.startswith("env.reset")]
    assert eval_resets == [_state_key(np.random.default_rng(agent.gpi_eval_seed))]
    linear_support = recorder.initial[id(agent.linear_support.rng)]
    weights = recorder.initial[id(agent._weight_rng)]
    assert len({eval_resets[0], linear_support, weights}) == 3


def test_the_brute_force_check_catches_a_raw_seed_and_an_offset(small_integer_streams):
    """The check itself can fail: the streams of seed 4 and of 4 + 7919 are found, a derived seed is not."""
    from prism.core.seeding import derive_seed

    assert small_integer_streams[_state_key(np.random.default_rng(4))] == 4
    assert small_integer_streams[_state_key(seeding.np_random(4 + 7919)[0])] == 4 + 7919
    assert _state_key(np.random.default_rng(derive_seed(4, "train/release"))) not in small_integer_streams
