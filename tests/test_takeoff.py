"""The halfcheetah-paper report's take-off count: the seeds of each arm whose final mean undiscounted forward
return exceeds the threshold, here and in the reference study's runs, against a count done by hand; and the
rates compared (exact CIs, Fisher's test) against brute-force binomial and hypergeometric sums."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from prism.experiments.grid import Cell, TakeOff
from prism.experiments.stats import fisher_exact_p, rate_interval
from prism.experiments.studies import load_preset
from prism.experiments.takeoff import final_returns, flip_section, take_off_section, take_off_tests

HALFCHEETAH_PAPER_ARMS = (
    "e-oracle",
    "e-baseline",
    "e-uniform",
    "e-prism",
)  # table1-study's equal-budget arms
HALFCHEETAH_PAPER_RUNS = "docs/results/halfcheetah-paper/runs"
PEER_CAPQL_ARM = "morlb-capql"  # morl-baselines' CAPQL (tools/peer_capql_run.py)


def _run(folder: Path, forward: list[float]) -> None:
    """A finished run whose periodic evaluations have these forward returns; the last row is the final one."""
    folder.mkdir(parents=True)
    lines = ["env_steps,hv,undiscounted_return_forward,final"]
    lines += [f"{(i + 1) * 5000},1.0,{v},{int(i == len(forward) - 1)}" for i, v in enumerate(forward)]
    (folder / "eval.csv").write_text("\n".join(lines) + "\n")
    (folder / "summary.json").write_text(json.dumps({}))


def test_take_off_counts_the_seeds_above_the_threshold_here_and_in_the_reference(tmp_path):
    reference = {"e-oracle": [530.0, 7.0, 499.9], "e-prism": [85.3]}
    for arm, finals in reference.items():
        for seed, value in enumerate(finals):
            _run(tmp_path / "ref" / "halfcheetah" / arm / f"seed{seed}", [1.0, value])
    (tmp_path / "ref" / "halfcheetah" / "e-oracle" / "seed7").mkdir()  # unfinished: no summary.json
    assert final_returns(tmp_path / "ref", "halfcheetah", "e-oracle", "forward") == [
        (0, 530.0),
        (1, 7.0),
        (2, 499.9),
    ]
    spec = TakeOff("halfcheetah", "forward", 500.0, str(tmp_path / "ref"), "the small budget")
    preset = dataclasses.replace(load_preset("halfcheetah-paper"), take_off=spec)
    key = "final_undiscounted_return_forward"
    table = {
        ("halfcheetah", "e-oracle"): {key: [900.0, 501.0, 12.0]},
        ("halfcheetah", "e-prism"): {key: [700.0]},
        ("halfcheetah", "e-uniform"): {key: [500.0]},  # not above: equal
    }
    lines, rows = take_off_section(preset, table)
    by_arm = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| e-")}
    assert by_arm["e-oracle"] == "| e-oracle | 2 of 3 | 900.0, 501.0, 12.0 | 1 of 3 | 530.0, 499.9, 7.0 |"
    assert by_arm["e-prism"] == "| e-prism | 1 of 1 | 700.0 | 0 of 1 | 85.3 |"
    assert by_arm["e-uniform"] == "| e-uniform | 0 of 1 | 500.0 | — | — |"
    assert by_arm["e-baseline"] == "| e-baseline | — | — | — | — |"
    assert {"arm": "e-oracle", "study": "the small budget", "took_off": 1, "runs": 3} in rows
    assert {"arm": "e-oracle", "study": "this", "took_off": 2, "runs": 3} in rows


def test_the_halfcheetah_paper_preset_runs_halfcheetah_only_and_joins_the_rest_at_their_budget():
    preset = load_preset("halfcheetah-paper")
    own = [c for c in preset.cells() if c.source is None]
    # five arms × 5 seeds, five more e-oracle seeds, and issue 60's divergence runs: oracle seed 3 rerun, and
    # the LayerNorm critic on that seed and three ordinary ones
    assert {c.env for c in own} == {"halfcheetah"} and len(own) == 35
    assert sorted(c.seed for c in own if c.method == "e-oracle") == list(range(10))
    assert sorted(c.seed for c in own if c.method == "e-oracle-rerun") == [3]
    assert sorted(c.seed for c in own if c.method == "e-oracle-ln") == [0, 1, 2, 3]
    assert preset.arm("e-oracle-ln").overrides == ("agent.critic_layer_norm=true",)
    # morl-baselines' tanh log-prob correction is an option, not an arm (the peer did not do better)
    assert "e-oracle-eps" not in preset.methods
    assert preset.arm("e-oracle-rerun").overrides == preset.arm("e-oracle").overrides
    # e-prism-paper runs on halfcheetah only: the joined envs hold the four arms their studies ran; the peer arm
    # (morl-baselines' CAPQL, tools/peer_capql_run.py) is read from this preset's own folder and never run
    assert {c.method for c in preset.cells() if c.source is not None and c.env != "halfcheetah"} == set(
        HALFCHEETAH_PAPER_ARMS
    )
    peer = [c for c in preset.cells() if c.method == PEER_CAPQL_ARM]
    assert sorted(c.seed for c in peer) == list(range(5)) and {c.env for c in peer} == {"halfcheetah"}
    assert {c.source for c in peer} == {preset.joined_source("halfcheetah", PEER_CAPQL_ARM).folder()}
    assert preset.joined_source("halfcheetah", PEER_CAPQL_ARM).runs == HALFCHEETAH_PAPER_RUNS
    assert preset.arm(PEER_CAPQL_ARM).method == "oracle"  # it sits beside the paper's oracle row
    paper = preset.arm("e-prism-paper").overrides
    assert {"loop.initial_episodes=1000", "loop.expert_episodes=1000", "reward.loss=randomized"} <= set(paper)
    assert {c.env for c in preset.cells() if c.source is not None} == {
        "walker",
        "swimmer",
        "hopper",
        "halfcheetah",
    }
    assert "loop.steps_per_cycle=100000" in preset.overrides_for("halfcheetah")
    assert not any(o.startswith("loop.steps_per_cycle=25000") for o in preset.overrides_for("halfcheetah"))
    assert preset.take_off.reference_folder().is_dir()


def _flip_run(folder: Path, forward: float, final_flip: float | None, reevaluated: float | None) -> None:
    """A finished run; its final row carries ``flipped_fraction`` when ``final_flip`` is given, and an
    ``evaluate.csv`` (a re-evaluation) holds ``reevaluated`` when that is given."""
    folder.mkdir(parents=True)
    header = "env_steps,hv,undiscounted_return_forward,final" + (
        ",flipped_fraction" if final_flip is not None else ""
    )
    final = f"10000,1.0,{forward},1" + (f",{final_flip}" if final_flip is not None else "")
    (folder / "eval.csv").write_text(
        f"{header}\n5000,1.0,0.0,0" + (",0.0" if final_flip is not None else "") + f"\n{final}\n"
    )
    (folder / "summary.json").write_text("{}")
    if reevaluated is not None:
        (folder / "evaluate.csv").write_text(
            f"protocol,hv,flipped_fraction\nperiodic,1.0,0.9\nperiodic,1.0,{reevaluated}\n"
        )


def test_the_flip_count_splits_seeds_by_take_off_and_back_reading_final_rows_then_reevaluations(tmp_path):
    spec = TakeOff("halfcheetah", "forward", 500.0)
    preset = dataclasses.replace(load_preset("halfcheetah-paper"), take_off=spec)
    runs = {  # seed: (forward, final flipped_fraction, evaluate.csv's last one)
        0: (900.0, 0.6, None),  # took off, on its back (final row)
        1: (10.0, None, 0.5),  # stalled, on its back: 0.5 counts (re-evaluation's last row, not its first)
        2: (20.0, None, 0.4),  # stalled, upright
        3: (30.0, None, None),  # not recorded
        4: (600.0, 0.0, 0.9),  # took off, upright: the final row wins over a re-evaluation
    }
    for seed, (forward, final, again) in runs.items():
        _flip_run(tmp_path / "halfcheetah" / "e-oracle" / f"seed{seed}", forward, final, again)
    (tmp_path / "halfcheetah" / "e-oracle" / "seed5").mkdir()  # unfinished: left out
    cells = [Cell("halfcheetah", "e-oracle", s) for s in range(6)] + [Cell("walker", "e-oracle", 0)]
    lines, rows = flip_section(preset, cells, tmp_path)
    row = next(line for line in lines if line.startswith("| e-oracle |"))
    assert row == (
        "| e-oracle | 4 of 5 | 1 | 1 | 1 | 1 | 1 | 0: 0.60 (final), 1: 0.50 (re-eval.), 2: 0.40 (re-eval.), "
        "4: 0.00 (final) |"
    )
    assert [(r["seed"], r["took_off"], r["on_its_back"], r["source"]) for r in rows] == [
        (0, 1, 1, "final"),
        (1, 0, 1, "re-evaluation"),
        (2, 0, 0, "re-evaluation"),
        (3, 0, "", "—"),
        (4, 1, 0, "final"),
    ]
    # no run recorded a flip: no section
    for seed in (0, 1, 2, 4):
        for name in ("eval.csv", "evaluate.csv"):
            (tmp_path / "halfcheetah" / "e-oracle" / f"seed{seed}" / name).unlink(missing_ok=True)
        _flip_run(tmp_path / "plain" / "halfcheetah" / "e-oracle" / f"seed{seed}", 1.0, None, None)
    assert flip_section(preset, cells, tmp_path / "plain") == ([], [])


# ---- take-off rates compared: exact CIs and Fisher's test, against brute-force sums -------------------------
def _binomial_tail(k: int, n: int, p: float, upper: bool) -> float:
    """P(X >= k) (upper) or P(X <= k) of X ~ Binomial(n, p), summed term by term."""
    terms = range(k, n + 1) if upper else range(0, k + 1)
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in terms)


def _fisher_brute_force(kx: int, nx: int, ky: int, ny: int) -> float:
    """Two-sided Fisher p by enumerating every table with the seen margins: the summed hypergeometric
    probability of the tables no more likely than the seen one (a 1e-7 relative slack for ties)."""
    total, hits = nx + ny, kx + ky

    def prob(a: int) -> float:
        return math.comb(nx, a) * math.comb(ny, hits - a) / math.comb(total, hits)

    seen = prob(kx)
    support = range(max(0, hits - ny), min(nx, hits) + 1)
    return min(1.0, sum(prob(a) for a in support if prob(a) <= seen * (1 + 1e-7)))


@pytest.mark.parametrize(("k", "n"), [(0, 5), (1, 5), (2, 5), (5, 5), (3, 10)])
def test_the_take_off_rate_interval_is_the_exact_clopper_pearson_one(k, n):
    low, high = rate_interval(k, n)
    # each end is the rate at which the count seen (or one further out) has probability 2.5 %
    assert low == 0.0 if k == 0 else _binomial_tail(k, n, low, upper=True) == pytest.approx(0.025, abs=1e-9)
    assert (
        high == 1.0 if k == n else _binomial_tail(k, n, high, upper=False) == pytest.approx(0.025, abs=1e-9)
    )
    assert low < k / n < high or k in (0, n)
    assert all(math.isnan(v) for v in rate_interval(0, 0))


@pytest.mark.parametrize(
    ("kx", "nx", "ky", "ny"), [(1, 5, 0, 5), (2, 5, 0, 5), (5, 5, 0, 5), (3, 7, 1, 9), (0, 4, 0, 6)]
)
def test_fishers_two_sided_p_is_the_sum_over_tables_no_more_likely_than_the_seen_one(kx, nx, ky, ny):
    assert fisher_exact_p(kx, nx, ky, ny) == pytest.approx(_fisher_brute_force(kx, nx, ky, ny), rel=1e-12)
    assert fisher_exact_p(kx, nx, ky, ny) == pytest.approx(fisher_exact_p(ky, ny, kx, nx), rel=1e-12)
    assert math.isnan(fisher_exact_p(1, 5, 0, 0))


def test_take_off_tests_compare_the_ratio_pairs_counts_and_leave_arms_without_runs_out():
    spec = TakeOff("halfcheetah", "forward", 500.0, None, "")
    preset = dataclasses.replace(load_preset("halfcheetah-paper"), take_off=spec)
    key = "final_undiscounted_return_forward"
    table = {
        ("halfcheetah", "e-oracle"): {key: [900.0, 3.0, 2.0, 1.0, 0.0]},
        ("halfcheetah", "e-baseline"): {key: [0.0] * 5},
        ("halfcheetah", "e-prism"): {key: [1100.0, 600.0, 501.0, 499.0, 8.0]},  # 499: not above
        ("halfcheetah", "e-uniform"): {key: [0.0] * 5},
    }
    lines, rows = take_off_tests(preset, table)
    by_pair = {(r["x"], r["y"]): r for r in rows}
    assert set(by_pair) == {(r.numerator, r.denominator) for r in preset.ratio_rows()}
    prism_vs_baseline = by_pair[("e-prism", "e-baseline")]
    assert (prism_vs_baseline["took_off_x"], prism_vs_baseline["runs_x"]) == (3, 5)
    assert (prism_vs_baseline["took_off_y"], prism_vs_baseline["runs_y"]) == (0, 5)
    assert prism_vs_baseline["p_fisher"] == pytest.approx(_fisher_brute_force(3, 5, 0, 5))
    low, high = rate_interval(3, 5)
    assert (
        f"| e-prism vs e-baseline | 3 of 5 [{low:.2f}, {high:.2f}] | 0 of 5 [0.00, 0.52] | 0.167 |" in lines
    )
    # e-prism-paper has no runs: its pairs say "—" and their p is NaN
    paper = by_pair[("e-prism-paper", "e-prism")]
    assert paper["runs_x"] == 0 and math.isnan(paper["p_fisher"])
    assert any(
        line.startswith("| e-prism-paper vs e-prism | — |") and line.endswith("| — |") for line in lines
    )


def test_a_seed_exactly_at_the_threshold_has_not_taken_off_in_any_count(tmp_path):
    """ "Took off" is strictly above the threshold everywhere a count is made: the table's rows, the rate
    tests and the flip split."""
    for seed, value in enumerate((500.0, 501.0)):  # the reference study's seeds: one at, one above
        _run(tmp_path / "ref" / "halfcheetah" / "e-prism" / f"seed{seed}", [1.0, value])
    spec = TakeOff("halfcheetah", "forward", 500.0, str(tmp_path / "ref"), "the reference")
    preset = dataclasses.replace(load_preset("halfcheetah-paper"), take_off=spec)
    key = "final_undiscounted_return_forward"
    table = {
        ("halfcheetah", "e-prism"): {key: [500.0, 500.0, 900.0]},
        ("halfcheetah", "e-baseline"): {key: [500.0, 500.0]},
    }
    lines, rows = take_off_section(preset, table)
    assert "| e-prism | 1 of 3 | 900.0, 500.0, 500.0 | 1 of 2 | 501.0, 500.0 |" in lines
    assert {"arm": "e-prism", "study": "this", "took_off": 1, "runs": 3} in rows
    assert {"arm": "e-prism", "study": "the reference", "took_off": 1, "runs": 2} in rows
    assert {"arm": "e-baseline", "study": "this", "took_off": 0, "runs": 2} in rows
    _, tests = take_off_tests(preset, table)
    pair = next(r for r in tests if (r["x"], r["y"]) == ("e-prism", "e-baseline"))
    assert (pair["took_off_x"], pair["took_off_y"]) == (1, 0)
    for seed, forward in enumerate((500.0, 900.0)):
        _flip_run(tmp_path / "own" / "halfcheetah" / "e-prism" / f"seed{seed}", forward, 0.0, None)
    _, flips = flip_section(preset, [Cell("halfcheetah", "e-prism", s) for s in (0, 1)], tmp_path / "own")
    assert [r["took_off"] for r in flips] == [0, 1]
