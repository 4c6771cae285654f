"""The GPU path on a CUDA device (skipped without one; ``tools/gpu_check.sh`` runs ``pytest -m cuda``).

The CPU tests establish that the static-buffer update is the old eager update bit for bit
(tests/test_static_update.py), that the stacked reward fit equals the members' fits
(tests/test_stacked_reward_fit.py) and that an env step copies once each way (tests/test_transfer.py). Here:
the same on the device, and a captured CUDA graph's replays equal the eager static path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tool_modules import load_tool

from prism.agents import transfer
from prism.agents.capql import CAPQLModule
from prism.agents.config import CAPQLConfig
from prism.envs import make_env
from prism.envs.registry import TOY_SPEC

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

gc = load_tool("graph_check")
SMALL = gc.SMALL


@pytest.mark.parametrize("seeds", [(0,), tuple(range(8))], ids=["S1", "S8"])
def test_graph_replay_equals_eager_static_path_over_100_updates(seeds):
    params, terms, captures = gc.compare(seeds, 100, "cuda")
    assert captures == 1  # captured once after the warm-up, then replayed
    assert params <= 1e-6 and terms <= 1e-6


def test_graph_is_recaptured_after_optimiser_state_is_loaded_and_relabel_runs_eagerly():
    graphed, eager = gc.make_agent((3, 4), "cuda", True), gc.make_agent((3, 4), "cuda", False)
    for agent in (graphed, eager):
        gc.fill(agent, 200)
        for _ in range(10):
            agent.update_step()
        for opt in agent._raw_optimizers:
            opt.load_state_dict(opt.state_dict())  # new state tensors: the old graph points at stale ones
        agent.relabel_fn = lambda batch: batch._replace(reward=batch.reward * 0.5)
        for _ in range(5):
            agent.update_step()
        agent.relabel_fn = None
        for _ in range(10):
            agent.update_step()
    assert graphed.static_update().captures == 1 and graphed.static_update().graph is not None
    assert gc.max_diff(graphed, eager) <= 1e-6


def test_to_device_is_one_packed_copy_with_the_arrays_values():
    arrays = [
        np.array([3, 1 << 35], dtype=np.int64),
        np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32),
    ]
    out = transfer.to_device(torch.device("cuda"), arrays)
    assert all(t.is_cuda for t in out)
    assert out[0].untyped_storage().data_ptr() == out[1].untyped_storage().data_ptr()  # one buffer, one copy
    for a, t in zip(arrays, out):
        assert np.array_equal(t.cpu().numpy(), a)


def test_training_run_with_graph_equals_without():
    """A short CUDA run through Lightning (env steps, shapers, replay on the device): the graphed update
    gives the same agent as the eager one."""
    import lightning as L

    def run(cuda_graph: bool) -> CAPQLModule:
        config = CAPQLConfig(**{**SMALL, "learning_starts": 100, "batch_size": 32, "cuda_graph": cuda_graph})
        agent = CAPQLModule(
            config, TOY_SPEC, lambda m: make_env(TOY_SPEC), seeds=(0, 1), target_env_steps=400
        )
        L.Trainer(accelerator="gpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False).fit(agent)  # fmt: skip
        return agent

    graphed, eager = run(True), run(False)
    assert graphed.static_update().captures == 1
    assert graphed.n_updates == eager.n_updates == 301  # clock 100..400
    for p, q in zip(graphed.parameters(), eager.parameters()):
        assert float((p - q).abs().max()) <= 1e-5


def test_stacked_reward_fit_on_cuda_equals_per_member_fits_without_dropout():
    """In float64 on the GPU, without dropout (a lone CUDA fit's fused dropout draws differently from the
    stacked fit's per-store masks: same distribution, other numbers)."""
    from segment_stores import synthetic_store
    from test_stacked_reward_fit import lone_fit, stacked_fit

    from prism.reward.config import ReSymNetConfig

    stores = [synthetic_store(45, 1), synthetic_store(60, 2), synthetic_store(75, 3)]
    seeds = [11, 2_007, 40_003]
    cfg = ReSymNetConfig(hidden=16, dropout=0.0, ensemble_size=2, batch_size=8, max_epochs=8, patience=2)
    stacked, _ = stacked_fit(stores, cfg, seeds, accelerator="gpu", devices=1)
    alone = [lone_fit(st, cfg, seed, accelerator="gpu", devices=1) for st, seed in zip(stores, seeds)]
    assert stacked.epochs_run.tolist() == torch.cat([m.epochs_run for m in alone]).tolist()
    for s, module in enumerate(alone):
        for (name, p), (_, q) in zip(stacked.net.named_parameters(), module.net.named_parameters()):
            torch.testing.assert_close(p[2 * s : 2 * s + 2], q, rtol=1e-7, atol=1e-9, msg=name)


def test_a_deterministic_cuda_run_repeats_bit_for_bit(tmp_path):
    """``deterministic: true``: two PRISM populations on the device (reward fits, graphed updates, evaluations)
    write the same numbers. Without the key they need not (docs/benchmarks.md: four HVs of one config)."""
    import json

    from toy_runs import toy_run

    from prism.run.fit import fit_run

    quickstart = str(Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml")
    before = torch.are_deterministic_algorithms_enabled()
    outputs = []
    try:
        for attempt in range(2):
            run_dir = tmp_path / str(attempt)
            overrides = [*toy_run({"eval.num_workers": 0}), "seeds=[0,1]", "figures=false", "device=cuda",
                         "deterministic=true", f"run_dir={run_dir}"]  # fmt: skip
            fit_run([quickstart], overrides, progress="none")
            files = [
                (run_dir / m / f).read_bytes() for m in ("seed0", "seed1") for f in ("eval.csv", "front.csv")
            ]
            fits = json.loads((run_dir / "seed0" / "summary.json").read_text())["reward_fits"]
            outputs.append((files, [fit["validation"]["segment_sum_mse"] for fit in fits]))
    finally:
        torch.use_deterministic_algorithms(before)
    assert len(outputs[0][1]) == 2  # both cycles' reward fits
    assert outputs[0] == outputs[1]


def test_a_single_seed_halfcheetah_prism_run_replays_its_graph_after_the_refit(tmp_path):
    """Two cycles of PRISM on mo-halfcheetah-v5, one seed, graphed updates. The refit between them runs its own
    Lightning Trainer, whose CUDA accelerator frees cuBLAS's workspaces; the update graph captured in cycle 1
    (we infer) pointed at them, and its first replay in cycle 2 was an illegal memory access (an H200,
    2026-11-28). The loop now drops the graph after every fit: the run ends, with cycle 2 trained through a
    graph of its own."""
    import csv

    from prism.run.fit import fit_run

    quickstart = str(Path(__file__).resolve().parents[1] / "conf" / "quickstart.yaml")
    overrides = ["env.id=mo-halfcheetah-v5", "loop.initial_episodes=6", "loop.expert_episodes=2",
                 "loop.cycles=2", "loop.steps_per_cycle=2000", "loop.checkpoint_every=1000",
                 "reward.max_epochs=3", "agent.learning_starts=500", "eval.every=1000", "eval.num_workers=0",
                 "eval.final.num_weights=3", "eval.final.episodes=1", "figures=false", "device=cuda",
                 "agent.cuda_graph=true", f"run_dir={tmp_path / 'run'}"]  # fmt: skip
    run = fit_run([quickstart], overrides, progress="none")
    with (tmp_path / "run" / "eval.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(int(r["env_steps"]), r["final"]) for r in rows][-1] == (4000, "1")
    assert run.loop.state.fits == 2
    runner = run.agent.static_update()
    assert runner.graph is not None and runner.captures == 1  # cycle 2's own capture, replayed since
