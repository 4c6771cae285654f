"""What a run leaves for its user: the loop package's own shape, output files and the closing block (issue 21)."""

from __future__ import annotations

from pathlib import Path

from tool_modules import load_tool

ROOT = Path(__file__).resolve().parents[1]


def test_loop_has_no_import_circle_even_under_type_checking():
    """outputs.py and run.py share their types through prism.run.members: no circle, not even a TYPE_CHECKING
    one (the runtime-only check of test_shape.py does not see those)."""
    tool = load_tool("import_graph")
    _, all_edges = tool.build_graph(ROOT)
    loop = {
        m: {d for d in deps if d.startswith("prism.loop")}
        for m, deps in all_edges.items()
        if m.startswith("prism.loop")
    }
    assert tool.cycles(loop) == []
    assert "prism.run.fit" not in all_edges["prism.run.outputs"]


def test_population_default_run_dir_is_named_after_its_seeds_and_its_config_has_no_seed():
    from prism.config import load_config, to_yaml

    single = load_config([ROOT / "conf" / "hopper.yaml"], ["seed=3"])
    population = load_config([ROOT / "conf" / "hopper.yaml"], ["seeds=[0,1,2]"])
    assert single.run_dir == "runs/mo-hopper-v5/prism/seed3"
    assert population.run_dir == "runs/mo-hopper-v5/prism/seeds0-1-2"  # not .../seed0 (then seed0/seed0 …)
    text = to_yaml(population)
    assert "\nseed:" not in f"\n{text}" and "seeds:" in text
    assert "\nseed: 3" in f"\n{to_yaml(single)}"


def test_the_default_run_dir_names_a_backbone_other_than_capql():
    """A GPI-PD run and a CAPQL run of one env, method and seed used to share runs/mo-hopper-v5/prism/seed0, so
    the second was refused ("run_dir … is not empty"). CAPQL's folders keep their names (committed runs,
    scripts); another backbone's name follows the method's."""
    from prism.config import load_config
    from prism.config.methods import backbone_suffix

    hopper, gpi_pd = ROOT / "conf" / "hopper.yaml", ROOT / "conf" / "agent" / "gpi_pd.yaml"
    capql = load_config([hopper, ROOT / "conf" / "agent" / "capql.yaml"])
    gpi = load_config([hopper, gpi_pd])
    assert capql.run_dir == "runs/mo-hopper-v5/prism/seed0"
    assert gpi.run_dir == "runs/mo-hopper-v5/prism-gpi_pd/seed0"
    baseline = load_config([hopper, gpi_pd, ROOT / "conf" / "method" / "baseline.yaml"], ["method_label=b2"])
    assert baseline.run_dir == "runs/mo-hopper-v5/b2-gpi_pd/seed0"
    # the label itself is unchanged (reports, summary.json): only the folder names the backbone
    assert (gpi.method, gpi.method_label) == ("prism", None)
    assert backbone_suffix("mypkg.agents:DDPG") == "-DDPG" and backbone_suffix("capql") == ""


def _result(n_obj: int, n_weights: int = 12):
    import numpy as np

    from prism.evaluation.result import EvalResult

    rng = np.random.default_rng(0)
    weights = rng.dirichlet(np.ones(n_obj), size=n_weights)
    returns = rng.normal(size=(n_weights, 2, n_obj))
    return EvalResult.from_returns(
        weights,
        returns,
        returns,
        np.full((n_weights, 2), 10),
        gamma=0.99,
        ref_point=[-10.0] * n_obj,
        eum_weights=weights,
        vo_preferences=rng.dirichlet(np.ones(2 * n_obj), size=4),
    )


def _front_line_styles(n_obj: int) -> set[str]:
    from prism.evaluation.figure import front_figure

    fig = front_figure(_result(n_obj), [f"o{i}" for i in range(n_obj)])
    return {line.get_linestyle() for ax in fig.axes for line in ax.get_lines()}


def test_front_figure_draws_points_not_a_zigzag_in_projections_of_three_objectives():
    assert _front_line_styles(3) == {"None"}  # markers only, in every 2-D projection
    assert _front_line_styles(2) == {"-"}  # a 2-objective front is a staircase: joined in order


def test_csv_files_end_lines_with_newline_only(tmp_path):
    from prism.evaluation.records import append_csv, truncate_eval_csv

    path = tmp_path / "eval.csv"
    append_csv(path, {"env_steps": 1, "hv": 2.0})
    append_csv(path, {"env_steps": 3, "hv": 4.0})
    assert path.read_bytes() == b"env_steps,hv\n1,2.0\n3,4.0\n"
    truncate_eval_csv(path, last_step=1)
    assert path.read_bytes() == b"env_steps,hv\n1,2.0\n"


def test_best_means_the_same_in_the_closing_block_and_summary_csv(tmp_path):
    """Best = the best periodic evaluation, in both places; the final (other protocol) is shown on its own."""
    import csv
    from types import SimpleNamespace

    from prism.evaluation.config import EvalConfig
    from prism.run.clock import RunTimes
    from prism.run.outputs import closing_summary, write_population_summary

    members = []
    for seed in (0, 1):
        member_dir = tmp_path / f"seed{seed}"
        member_dir.mkdir()
        rows = ["env_steps,hv,eum,vo,final", "100,1.0,0.1,0.5,0", "200,3.0,0.3,0.2,0", "200,5.0,0.5,0.1,1"]
        (member_dir / "eval.csv").write_text("\n".join(rows) + "\n")
        evaluation = SimpleNamespace(config=EvalConfig().resolved(seed))
        members.append(SimpleNamespace(seed=seed, run_dir=member_dir, evaluation=evaluation))
    write_population_summary(tmp_path, [m.run_dir for m in members])
    run = SimpleNamespace(
        config=SimpleNamespace(method="prism", method_label="lr-sweep", figures=True),
        spec=SimpleNamespace(id="prism/Toy-v0"),
        population=True,
        members=members,
        agent=SimpleNamespace(env_step_count=200),
        run_dir=tmp_path,
    )
    text = closing_summary(run, RunTimes(wall_s_this_process=1.0, wall_s=1.0, cpu_s=1.0))
    with (tmp_path / "summary.csv").open(newline="") as fh:
        table = {r["seed"]: r for r in csv.DictReader(fh)}
    assert float(table["0"]["best_hv"]) == 3.0 and float(table["0"]["final_hv"]) == 5.0
    assert "best         HV 3 @ 200" in text and "final        HV 5 " in text
    assert "HV 5 @" not in text  # the final row is not a candidate for best
    assert text.startswith("prism fit: done: lr-sweep on prism/Toy-v0")  # the label, not the method


def test_the_closing_block_shows_the_hv_curve_and_says_what_to_look_at(tmp_path):
    """A first run ends by saying where to see the loop work: the periodic HV against env steps (printed, and
    eval/hv in TensorBoard), each evaluation's front figure, the reward fits' quality and the final front."""
    from types import SimpleNamespace

    from prism.evaluation.config import EvalConfig
    from prism.run.clock import RunTimes
    from prism.run.outputs import closing_summary

    rows = (
        ["env_steps,hv,eum,vo,final"] + [f"{100 * k},{k}.5,0.1,0.5,0" for k in range(1, 9)] + ["800,9,1,1,1"]
    )
    (tmp_path / "eval.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "tb" / "reward_fit").mkdir(parents=True)
    member = SimpleNamespace(
        seed=0, run_dir=tmp_path, evaluation=SimpleNamespace(config=EvalConfig().resolved(0))
    )
    run = SimpleNamespace(
        config=SimpleNamespace(method="prism", method_label=None, figures=True),
        spec=SimpleNamespace(id="prism/Toy-v0"),
        population=False,
        members=[member],
        agent=SimpleNamespace(env_step_count=800),
        run_dir=tmp_path,
    )
    lines = closing_summary(run, RunTimes(wall_s_this_process=1.0, wall_s=1.0, cpu_s=1.0)).splitlines()
    (curve,) = [line for line in lines if line.startswith("  HV curve")]
    # 8 periodic rows, at most 6 shown: the first and the last always, the final row never
    assert "1.5 @ 100 → " in curve and "→ 8.5 @ 800   (the learning curve" in curve and "9 @" not in curve
    assert curve.count(" @ ") == 6 and "…" in curve
    start = next(i for i, line in enumerate(lines) if line.startswith("  look at"))
    look = " ".join(lines[start:-1])  # the lines up to the TensorBoard command
    for what in (
        "eval/hv against env steps",
        "eval/front",
        "reward/val_correlation",
        str(tmp_path / "front.csv"),
    ):
        assert what in look, what
    assert lines[-1].startswith("  TensorBoard  tensorboard --logdir")
