"""Population runs end to end: layout, S = 1 is a single run, reward fits equal solo fits, determinism,
SIGKILL resume, prism evaluate on member and population folders, and the `seeds` errors."""

from __future__ import annotations

import csv
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from subprocess_runs import child
from toy_runs import toy_run

from prism.cli import main
from prism.config import load_config
from prism.run.fit import build_run, fit_run

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
TOY = toy_run({"loop.checkpoint_every": 100, "eval.every": 100, "eval.final.num_weights": 4})
TOY_NO_MODEL = toy_run(
    {"loop.checkpoint_every": 100, "eval.every": 100, "eval.final.num_weights": 4}, resymnet=False
)
"""For a model-free overlay (baseline): without ReSymNet's own keys, which it would refuse."""
MEMBER_FILES = {"config.yaml", "eval.csv", "front.csv", "summary.json"}


def _fit(run_dir: Path, *overrides: str):
    return fit_run([str(CONF / "quickstart.yaml")], [*TOY, *overrides, f"run_dir={run_dir}"])


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def population(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("population") / "run"
    _fit(run_dir, "seeds=[3,5]")
    return run_dir


def test_population_layout_and_summary(population):
    for seed in (3, 5):
        member = population / f"seed{seed}"
        assert {p.name for p in member.iterdir()} >= MEMBER_FILES
        assert any((member / "tb").glob("events.out.tfevents*"))
        config = yaml.safe_load((member / "config.yaml").read_text())
        assert config["seed"] == seed and config["seeds"] is None and config["run_dir"] == str(member)
        rows = _rows(member / "eval.csv")
        assert [(int(r["env_steps"]), r["final"]) for r in rows] == [(100, "0"), (200, "0"), (300, "0"),
                                                                      (400, "0"), (400, "1")]  # fmt: skip
        assert len(_rows(member / "front.csv")) == 4  # the final protocol's 4 weights
    # members differ (different seeds), and summary.csv is their mean ± SE
    first, second = (_rows(population / f"seed{s}" / "eval.csv") for s in (3, 5))
    assert first != second
    table = {r["seed"]: r for r in _rows(population / "summary.csv")}
    assert set(table) == {"3", "5", "mean", "se"}
    for key in ("hv", "eum", "vo"):
        finals = [float(rows[-1][key]) for rows in (first, second)]
        assert float(table["3"][f"final_{key}"]) == pytest.approx(finals[0])
        assert float(table["mean"][f"final_{key}"]) == pytest.approx(np.mean(finals))
        assert float(table["se"][f"final_{key}"]) == pytest.approx(np.std(finals, ddof=1) / math.sqrt(2))
        best = max(float(r[key]) for r in first if r["final"] == "0")
        assert float(table["3"][f"best_{key}"]) == pytest.approx(best)
    # the population's own files: config (with seeds) and one checkpoint for all members
    assert yaml.safe_load((population / "config.yaml").read_text())["seeds"] == [3, 5]
    assert (population / "checkpoints" / "last.pt").is_file()
    assert not (population / "eval.csv").exists()


def test_a_population_of_one_is_the_single_run(tmp_path):
    """S = 1 is the same code path: `seeds: [3]` gives seed3/eval.csv byte-identical to `seed: 3`."""
    _fit(tmp_path / "single", "seed=3")
    _fit(tmp_path / "pop", "seeds=[3]")
    assert (tmp_path / "pop" / "seed3" / "eval.csv").read_bytes() == (
        tmp_path / "single" / "eval.csv"
    ).read_bytes()
    assert (tmp_path / "pop" / "seed3" / "front.csv").read_bytes() == (
        tmp_path / "single" / "front.csv"
    ).read_bytes()


def test_population_reward_fits_equal_solo_fits(tmp_path):
    """Member m's first reward model is exactly the model of the solo run with seed m (same data, same seed)."""

    def first_models(*overrides: str):
        config = load_config([CONF / "quickstart.yaml"], [*TOY, *overrides, f"run_dir={tmp_path / 'x'}"])
        run = build_run(config, progress_bar=False)
        run.loop._advance(run.agent, None)  # collect N random episodes per member, fit, stop at RL
        return run.loop.models

    population = first_models("seeds=[3,5]")
    for m, seed in enumerate((3, 5)):
        (solo,) = first_models(f"seed={seed}")
        pop_state, solo_state = population[m].state_dict(), solo.state_dict()
        assert pop_state.keys() == solo_state.keys()
        for key in pop_state:
            torch.testing.assert_close(pop_state[key], solo_state[key], rtol=0, atol=0, msg=key)
    assert not torch.equal(
        population[0].state_dict()["feature_mean"], population[1].state_dict()["feature_mean"]
    )


def test_prism_evaluate_on_member_and_population_folders(population, capsys):
    assert main(["evaluate", str(population / "seed5")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 2 and out[0].startswith("seed 5: protocol=final, num_weights=")
    assert out[1] == f"prism evaluate: appended a row to {population / 'seed5' / 'evaluate.csv'}"
    assert "env_steps=400" in out[0]
    member_row = _rows(population / "seed5" / "evaluate.csv")[-1]
    # the final protocol (the default) on the checkpoint at step 400 reproduces the member's final row
    final = _rows(population / "seed5" / "eval.csv")[-1]
    assert final["final"] == "1" and member_row["protocol"] == "final"
    assert float(member_row["hv"]) == pytest.approx(float(final["hv"]))
    assert f"hv={float(final['hv']):.6g}" in out[0]
    assert main(["evaluate", str(population)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    appended = out.pop()  # where the rows went, every member's file
    assert appended == (
        f"prism evaluate: appended a row to {population / 'seed3' / 'evaluate.csv'}, "
        f"{population / 'seed5' / 'evaluate.csv'}"
    )
    assert [line.split(":")[0] for line in out] == ["seed 3", "seed 5"]
    for seed, line in zip((3, 5), out):  # each member's value is its own final row of eval.csv
        assert f"hv={float(_rows(population / f'seed{seed}' / 'eval.csv')[-1]['hv']):.6g}," in line
    assert (
        len(_rows(population / "seed5" / "evaluate.csv")) == 2
        and len(_rows(population / "seed3" / "evaluate.csv")) == 1
    )


@pytest.mark.parametrize(
    "value",
    ["[]", "[1,1]", "[a,1]", "[-2]", "3"],
)
def test_bad_seeds_exit_2_with_one_line_naming_seeds(value, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(
        ["fit", "--config", str(CONF / "quickstart.yaml"), *TOY, f"seeds={value}", f"run_dir={run_dir}"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("prism: error: seeds:")
    assert not run_dir.exists()


# ---- determinism and SIGKILL resume (subprocesses) ---------------------------------------------------------
def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _fit_cmd(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "prism.cli", "fit", "--config", str(CONF / "quickstart.yaml"), *TOY,
            "seeds=[3,5]", f"run_dir={run_dir}"]  # fmt: skip


def _member_tables(run_dir: Path) -> list[bytes]:
    return [(run_dir / f"seed{s}" / "eval.csv").read_bytes() for s in (3, 5)]


@pytest.mark.slow  # whole population runs in subprocesses
def test_population_is_deterministic_and_resumes_byte_identically_after_sigkill(population, tmp_path):
    again = tmp_path / "again"
    subprocess.run(_fit_cmd(again), env=_env(), check=True, capture_output=True, timeout=600)
    assert _member_tables(again) == _member_tables(population)

    killed = tmp_path / "killed"
    csv_path = killed / "seed5" / "eval.csv"
    process = subprocess.Popen(
        _fit_cmd(killed), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 300
    with child(
        process
    ):  # kill deep in RL of cycle 2: after the refit and two evaluations of the second member
        while not ((killed / "seed5" / "tb" / "reward_fit" / "cycle2").is_dir() and csv_path.is_file()
                   and csv_path.read_text().count("\n") >= 3):  # fmt: skip
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "kill point never reached"
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not (killed / "summary.csv").exists()
    subprocess.run([sys.executable, "-m", "prism.cli", "fit", "--resume", str(killed)], env=_env(), check=True,
                   capture_output=True, timeout=600)  # fmt: skip
    assert _member_tables(killed) == _member_tables(population)
    assert (killed / "summary.csv").read_bytes() == (population / "summary.csv").read_bytes()


@pytest.mark.parametrize("method", ["prism", "baseline"])
def test_steps_per_batch_changes_nothing_but_speed(method, tmp_path):
    """Several (env step, update) iterations per Lightning batch: callbacks still see every step they asked for
    (evaluations every 100, checkpoints every 100, cycle ends at 200), so the run is the same to the byte.
    7 divides none of those, so every boundary needs a pause."""
    overlay = str(CONF / "method" / f"{method}.yaml")
    runs = {}
    for k in (1, 7):
        run_dir = tmp_path / f"k{k}"
        fit_run(
            [str(CONF / "quickstart.yaml"), overlay],
            [
                *(TOY if method == "prism" else TOY_NO_MODEL),
                f"agent.steps_per_batch={k}",
                f"run_dir={run_dir}",
            ],
        )
        runs[k] = run_dir
    assert (runs[7] / "eval.csv").read_bytes() == (runs[1] / "eval.csv").read_bytes()
    steps = [int(r["env_steps"]) for r in _rows(runs[7] / "eval.csv")]
    assert steps == [100, 200, 300, 400, 400]
    before = torch.load(runs[1] / "checkpoints" / "last.pt", weights_only=True)
    after = torch.load(runs[7] / "checkpoints" / "last.pt", weights_only=True)
    for key, value in before["agent"].items():
        torch.testing.assert_close(after["agent"][key], value, rtol=0, atol=0, msg=key)
