"""The verdict lines of ``tools/gpu_check.sh``: one per goal (issue 20's, and the ``deterministic`` key's),
read from the step logs.

    python tools/gpu_check_verdicts.py OUT_DIR

Each line reads ``VERDICT <goal>: PASS|FAIL|MISSING (<measured> vs <goal>)``; MISSING means the step that
measures it did not print its number (it failed, timed out or was skipped: see its log). ``INFO`` lines carry
the other numbers worth recording (overheads, the eager run, the tests, the quickstart).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

GOALS = (
    ("graph_equals_eager", "graph replay == eager static path within 1e-6 over 100 updates"),
    ("single_run_vs_morl", "single run >= 6x morl-baselines"),
    ("population_s8_vs_morl", "population S=8 aggregate >= 30x morl-baselines' single run"),
    ("population_s32_vs_morl", "population S=32 aggregate >= 100x morl-baselines' single run"),
    ("reward_fit_batched", "reward fit batched >= 3x sequential"),
    ("stacked_refit", "stacked S x K refit (S=10, ~122 000 steps each) >= 5x sequential member fits"),
    ("deterministic_repeats", "a population quickstart with deterministic=true repeats bit for bit"),
)


def number(text: str, key: str) -> float | None:
    """The last ``<key>: <number>`` (an optional trailing ``x``) in ``text``."""
    found = re.findall(rf"^{re.escape(key)}:\s*([-+0-9.eE]+|nan|inf)x?\s*$", text, flags=re.M)
    return float(found[-1]) if found else None


def rate(text: str, label: str) -> float | None:
    """Env-steps/s of ``<label>: <x> env-steps/s`` (bench_train's per-side lines)."""
    found = re.findall(rf"^{re.escape(label)}:\s*([0-9.]+) env-steps/s", text, flags=re.M)
    return float(found[-1]) if found else None


def _line(goal: str, value: float | None, ok: bool, detail: str) -> str:
    status = "MISSING" if value is None else ("PASS" if ok else "FAIL")
    return f"VERDICT {goal}: {status} ({detail})"


def verdicts(logs: dict[str, str]) -> list[str]:
    """One verdict line per goal (in :data:`GOALS` order), then INFO lines, from the step logs by name."""
    get = lambda name: logs.get(name, "")  # noqa: E731
    out = []
    # 1. graph == eager: the worst difference, 100 updates per S, and the graph really captured (once per S).
    gc = get("graph_check")
    diff = number(gc, "graph_vs_eager_max_abs_diff")
    updates = [int(u) for u in re.findall(r"^S=\d+: (\d+) updates", gc, flags=re.M)]
    captures = re.findall(r"^graph_captures:\s*(.*)$", gc, flags=re.M)
    captured = [int(c) for c in captures[-1].split()] if captures else []
    ok = diff is not None and diff <= 1e-6 and bool(updates) and min(updates) >= 100
    ok = ok and bool(captured) and all(c == 1 for c in captured)
    out.append(_line("graph_equals_eager", diff, ok,
                     f"max |diff| {diff} <= 1e-6; updates {updates} >= 100; captures {captured} == 1"))  # fmt: skip
    # 2. single run vs morl-baselines, with the graph on.
    train = get("bench_train_graph")
    speedup = number(train, "speedup_vs_morl_baselines")
    out.append(
        _line("single_run_vs_morl", speedup, speedup is not None and speedup >= 6, f"{speedup}x >= 6x")
    )
    # 3. population aggregate vs morl-baselines' single run (measured in the same bench_train call).
    morl = rate(train, "morl_baselines_capql") or rate(get("bench_train_eager"), "morl_baselines_capql")
    for s, goal, need in ((8, "population_s8_vs_morl", 30), (32, "population_s32_vs_morl", 100)):
        pop = number(get(f"bench_population_s{s}"), "population_env_steps_per_s")
        ratio = None if pop is None or not morl else pop / morl
        detail = f"{pop} / {morl} env-steps/s = {ratio if ratio is None else round(ratio, 2)}x >= {need}x"
        out.append(_line(goal, ratio, ratio is not None and ratio >= need, detail))
    # 4. reward fit, batched K vs K fits in sequence.
    fit = number(get("bench_reward_fit"), "speedup_vs_sequential")
    out.append(_line("reward_fit_batched", fit, fit is not None and fit >= 3, f"{fit}x >= 3x"))
    # 5. stacked population refit at S = 10.
    stacked_log = get("bench_reward_fit_stacked")
    stacked = number(stacked_log, "stacked_speedup_vs_sequential")
    s10 = re.search(r"^stacked S=10 x", stacked_log, flags=re.M) is not None
    out.append(_line("stacked_refit", stacked, stacked is not None and stacked >= 5 and s10,
                     f"{stacked}x >= 5x at S=10 ({'S=10' if s10 else 'not S=10'})"))  # fmt: skip
    # 6. deterministic=true: two fresh processes of one config write the same eval.csv and front.csv.
    same = re.findall(
        r"^deterministic_files_identical: (\d+)/(\d+)", get("quickstart_deterministic"), flags=re.M
    )
    equal, total = (int(same[-1][0]), int(same[-1][1])) if same else (None, None)
    out.append(_line("deterministic_repeats", equal, total is not None and total > 0 and equal == total,
                     f"{equal}/{total} files identical"))  # fmt: skip
    # INFO: what else the check measured.
    for key, name in (
        ("overhead_vs_bare_graph", "bench_train_graph"),
        ("overhead_vs_bare_torch", "bench_train_graph"),
        ("speedup_vs_morl_baselines", "bench_train_eager"),
        ("overhead_vs_bare_torch", "bench_train_eager"),
        ("aggregate_speedup_vs_solo", "bench_population_s8"),
    ):
        out.append(f"INFO {name} {key}: {number(get(name), key)}")
    tests = re.findall(
        r"^=*\s*(\d+ passed.*?|\d+ failed.*?|\d+ skipped.*?)\s*=*$", get("cuda_tests"), flags=re.M
    )
    out.append(f"INFO cuda_tests: {tests[-1] if tests else 'no pytest summary'}")
    quick = re.findall(r"^step quickstart_population rc=(\d+)", get("gpu_check"), flags=re.M)
    out.append(f"INFO quickstart_population rc: {quick[-1] if quick else 'not run'}")
    wall = number(get("quickstart_deterministic"), "deterministic_run_wall_s")
    out.append(f"INFO quickstart_deterministic run_wall_s: {wall}")
    return out


def main() -> None:
    out_dir = Path(sys.argv[1])
    logs = {p.stem: p.read_text(errors="replace") for p in out_dir.glob("*.log")}
    for line in verdicts(logs):
        print(line)


if __name__ == "__main__":
    main()
