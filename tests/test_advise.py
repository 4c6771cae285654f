"""``prism advise`` (prism/experiments/advise.py, its command line advise_cli.py): the numbers behind the advice,
the advice itself, and the command's output and errors."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from prism.cli import main
from prism.config import load_config
from prism.core._text import significant
from prism.data.datamodule import sample_segment_steps
from prism.envs.registry import get_env_spec
from prism.experiments import advise, advise_cli, uniform_credit
from prism.experiments.advise import Advice, EpisodeEnds, SamplingVariance, recommend
from prism.experiments.uniform_credit import RandomEpisode

ROOT = Path(__file__).resolve().parents[1]


def _episodes(rng: np.random.Generator, lengths: list[int]) -> list[np.ndarray]:
    """Segments with a drift along them and noise, each with its own level (so Var(R) > 0)."""
    return [rng.normal() + np.linspace(0.0, 1.0, t) + rng.normal(scale=0.7, size=t) for t in lengths]


# ---- the variance ratio ----------------------------------------------------------------------------------------


def test_the_sampled_sums_variance_is_the_finite_population_formula_by_brute_force():
    """(T/K)·Σ over K of T steps drawn without replacement, 40 000 draws: its variance is T²(1−K/T)σ²/K."""
    rng = np.random.default_rng(0)
    for t, k in ((100, 16), (250, 64), (40, 39)):
        rewards = _episodes(rng, [t])[0]
        draws = rng.random((40_000, t)).argsort(axis=1)[:, :k]  # K distinct steps per draw, uniformly
        estimates = (t / k) * rewards[draws].sum(axis=1)
        assert estimates.mean() == pytest.approx(rewards.sum(), rel=0.01, abs=0.05)  # unbiased
        closed = advise.sampled_sum_variance(rewards, k)
        assert closed == pytest.approx(t * t * (1 - k / t) * rewards.var(ddof=1) / k)
        assert estimates.var() == pytest.approx(closed, rel=0.05)
    assert advise.sampled_sum_variance(rewards, 40) == 0.0  # T ≤ K: the whole segment, no sampling


def test_the_formula_is_the_variance_of_the_fits_own_step_sampler():
    """The fast fit's sampler (``sample_segment_steps``, uniform, its K from conf/fit/fast.yaml) drawn 20 000
    times over a store of segments of mixed lengths: each segment's (T/K)·Σ varies as the formula says, and
    prism advise computes its ratio at that K and sampling."""
    fast = load_config([ROOT / "conf" / "fit" / "fast.yaml"]).reward
    assert (fast.loss, fast.sampling) == ("randomized", "uniform")
    config = advise_cli._config("mo-swimmer-v5", None, [])
    assert (config.reward.sampled_steps, config.reward.sampling) == (fast.sampled_steps, "uniform")
    k = fast.sampled_steps
    rng = np.random.default_rng(1)
    segments = _episodes(rng, [3 * k, k + 5, k, 20])
    values = torch.tensor(np.concatenate(segments))
    lengths = torch.tensor([len(r) for r in segments])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    draws, b = 20_000, len(segments)
    selection = torch.arange(b).expand(draws, -1)  # every draw holds every segment
    rows, ids, valid, counts = sample_segment_steps(offsets, selection, k, torch.Generator().manual_seed(2))
    sums = torch.zeros(draws, b + 1, dtype=values.dtype).scatter_add_(1, ids, values[rows] * valid)[:, :b]
    estimates = (lengths / counts) * sums  # [draws, B]
    for i, rewards in enumerate(segments):
        closed = advise.sampled_sum_variance(rewards, k)
        if len(rewards) <= k:
            assert closed == 0.0 and float(estimates[:, i].var()) == pytest.approx(0.0, abs=1e-18)
        else:
            assert float(estimates[:, i].var()) == pytest.approx(closed, rel=0.05)


def test_sampling_variance_averages_the_segments_and_finds_the_k_of_ratio_one():
    rng = np.random.default_rng(3)
    segments = _episodes(rng, [200, 150, 30, 200, 90, 120])
    got = advise.sampling_variance(segments, 64)
    each = [advise.sampled_sum_variance(r, 64) for r in segments]
    assert got.estimate_variance == pytest.approx(np.mean(each))
    assert got.return_variance == pytest.approx(np.var([r.sum() for r in segments], ddof=1))
    assert got.ratio == pytest.approx(np.mean(each) / got.return_variance)
    assert got.long_share == pytest.approx(5 / 6) and got.mean_length == pytest.approx(790 / 6)
    ratios = {
        k: np.mean([advise.sampled_sum_variance(r, k) for r in segments]) / got.return_variance
        for k in range(1, 201)
    }
    assert got.k_for_ratio_one == min(k for k, ratio in ratios.items() if ratio <= 1.0)


# ---- eta and the episode ends ------------------------------------------------------------------------------------


def test_advise_eta_is_uniform_credits_on_the_same_episodes():
    episodes = uniform_credit.collect_random_episodes(get_env_spec("mo-hopper-v5"), 20, 1)
    measured = advise.measure(episodes, 64, 1000)
    _, eta = uniform_credit.uniform_pearson(uniform_credit.random_episode_rewards("mo-hopper-v5", 20, 1))
    assert measured.eta == pytest.approx(eta, abs=1e-12)


def test_random_hoppers_end_at_a_fall_and_swimmers_at_the_time_limit():
    hopper = uniform_credit.collect_random_episodes(get_env_spec("mo-hopper-v5"), 20, 0)
    ends = advise.episode_ends(hopper, 1000)
    assert ends.terminated == 20 and ends.fall and ends.mean_length < 100
    swimmer = uniform_credit.collect_random_episodes(get_env_spec("mo-swimmer-v5"), 2, 0)
    ends = advise.episode_ends(swimmer, 1000)
    assert (ends.terminated, ends.min_length, ends.max_length, ends.fall) == (0, 1000, 1000, False)


def test_episode_ends_counts_terminations_on_hand_built_episodes():
    def episode(t: int, terminated: bool) -> RandomEpisode:
        released = np.zeros(t, dtype=bool)
        released[-1] = True
        return RandomEpisode(np.ones(t), released, terminated)

    ends = advise.episode_ends(
        [episode(10, True), episode(50, False), episode(30, True), episode(50, False)], 50
    )
    assert (ends.terminated, ends.terminated_share, ends.fall) == (2, 0.5, True)  # half: at FALL_SHARE
    assert (ends.mean_length, ends.min_length, ends.max_length, ends.time_limit) == (35.0, 10, 50, 50)
    ends = advise.episode_ends([episode(10, True), episode(50, False), episode(50, False)], 50)
    assert not ends.fall


def test_segments_are_cut_after_each_release():
    released = np.array([False, True, False, False, True, True, False, True])
    episode = RandomEpisode(np.arange(8.0), released, False)
    assert [list(s) for s in episode.segments()] == [[0, 1], [2, 3, 4], [5], [6, 7]]
    # early releases (env.p_rel) on the toy env: the segments tile each episode, one per release
    episodes = uniform_credit.collect_random_episodes(get_env_spec("prism/Toy-v0"), 5, 0, p_rel=0.3)
    for e in episodes:
        assert e.released[-1] and len(e.segments()) == int(e.released.sum())
        assert np.array_equal(np.concatenate(e.segments()), e.rewards)
    assert sum(len(e.segments()) for e in episodes) > len(episodes)


# ---- the recommendation ---------------------------------------------------------------------------------------


def _advice(
    eta: float, ratio: float, long_share: float = 1.0, fall: bool = False, segment_length: float | None = None
) -> Advice:
    length = 25.0 if fall else 1000.0
    sampling = SamplingVariance(64, estimate_variance=ratio * 10.0, return_variance=10.0, long_share=long_share,
                                mean_length=segment_length or length, k_for_ratio_one=500)  # fmt: skip
    ends = EpisodeEnds(100, 100 if fall else 0, length, 9, 1000, 1000)
    return Advice(eta, sampling, ends)


def test_recommend_on_hand_built_numbers():
    # hopper-like: R/T carries survival
    got = recommend(_advice(eta=0.67, ratio=0.0, long_share=0.02, fall=True))
    assert got.choice == "uniform" and got.evidence == advise.UNIFORM_WHERE_FALLS
    # swimmer-like: little credit in R/T, sampling noise 24x the returns' spread -> eq. 1, the fast-fit rows shown
    got = recommend(_advice(eta=0.02, ratio=24.0))
    assert got.choice == "eq1" and got.evidence == advise.RESYMNET_WHERE_FIXED + advise.FAST_FIT_ROWS
    assert any("K = 500" in reason for reason in got.reasons)
    # halfcheetah-like: noise about the returns' spread -> the fast fit
    got = recommend(_advice(eta=0.09, ratio=1.0))
    assert got.choice == "fast" and advise.FAST_FIT_ROWS[0] in got.evidence
    assert recommend(_advice(eta=0.09, ratio=advise.RATIO_CHEAP)).choice == "fast"  # the bound is inclusive
    # short episodes: the randomized loss is eq. 1 on almost every one, so the fast fit saves little
    assert recommend(_advice(eta=0.05, ratio=0.0, long_share=0.02)).choice == "eq1"
    # at the threshold, R/T counts as carrying credit
    assert recommend(_advice(eta=advise.ETA_CARRIES_CREDIT, ratio=0.0, fall=True)).choice == "uniform"


def test_recommend_says_where_no_study_has_been():
    between = recommend(_advice(eta=0.3, ratio=0.0, fall=True))
    assert "no study" in between.reasons[0]
    for eta, fall in ((0.02, False), (0.09, False), (0.11, False), (0.44, True), (0.47, True), (0.67, True)):
        # the studied envs' own eta, as measured on 60-300 random episodes, are not "unlike any study"
        assert not any("no study" in r for r in recommend(_advice(eta=eta, ratio=0.0, fall=fall)).reasons)
    # credit in R/T without falls, or falls without credit: unlike every studied env, and said so
    assert any("do not end at a fall" in r for r in recommend(_advice(eta=0.6, ratio=0.0)).reasons)
    assert any(
        "end at a fall, unlike" in r for r in recommend(_advice(eta=0.02, ratio=1.0, fall=True)).reasons
    )
    # releases inside episodes (env.p_rel > 0): short segments, which no study had
    short = recommend(_advice(eta=0.68, ratio=0.0, long_share=0.0, segment_length=10.2))
    assert short.choice == "uniform" and "segments of 10.2 steps" in short.reasons[-1]
    assert not any("p_rel" in r for r in recommend(_advice(eta=0.68, ratio=0.0)).reasons)


def test_a_constant_hidden_channel_is_uniforms_exactly():
    """A channel that is one number at every step (mo-mountaincarcontinuous-v0's time penalty): η is 0/0, R/T
    is r_t exactly, and the advice says so without citing a study."""
    released = np.zeros(30, dtype=bool)
    released[[9, 29]] = True
    episodes = [RandomEpisode(np.full(30, -1.0), released, False) for _ in range(4)]
    measured = advise.measure(episodes, 4, 30)
    assert measured.constant and measured.eta == 1.0 and measured.sampling.estimate_variance == 0.0
    got = recommend(measured)
    assert got.choice == "uniform" and got.evidence == () and "R/T is r_t exactly" in got.reasons[0]


def test_every_cited_row_is_a_committed_hv_row_and_its_line_carries_the_verdict():
    for row in advise.UNIFORM_WHERE_FALLS + advise.RESYMNET_WHERE_FIXED + advise.FAST_FIT_ROWS:
        preset, env_id, a, b = row
        with (ROOT / "docs" / "results" / preset / "ratios.csv").open() as fh:
            (found,) = [
                r for r in csv.DictReader(fh)
                if (r["metric"], r["env"], r["numerator"], r["denominator"]) == ("hv", env_id, a, b)
            ]  # fmt: skip
        line = advise.evidence_line(row)
        assert line.startswith(f"[{preset} {env_id[3:-3]}: {a} / {b}]")
        assert line.endswith(f": {found['verdict']}") and f"HV {float(found['ratio']):.2f} [" in line


def test_evidence_lines_name_the_file_where_the_results_are_absent(tmp_path):
    line = advise.evidence_line(advise.FAST_FIT_ROWS[0], results=tmp_path)
    assert (
        line
        == "[table1-study swimmer: e-prism-fast / e-prism] (docs/results/table1-study/ratios.csv and report.md, in the repository)"
    )


# ---- the command ----------------------------------------------------------------------------------------------


def test_a_small_variance_ratio_is_printed_with_its_significant_digits_not_as_zero():
    """A ratio of 0.0044 printed as 0.00 (and 0.0x in the advice) read as no sampling noise at all."""
    from prism.experiments.advise_cli import report_lines

    small = _advice(eta=0.05, ratio=0.0044)
    lines = report_lines("mo-hopper-v5", "forward", 1, small, 1.0)
    assert lines[3].startswith("randomized fit's variance ratio: 0.0044 = "), lines[3]
    assert any("the sampled sum's variance is 0.0044x the returns'" in r for r in recommend(small).reasons)
    large = recommend(_advice(eta=0.02, ratio=21.34)).reasons
    assert any("the sampled sum's variance is 21.3x the returns'" in r for r in large)
    assert [significant(x) for x in (4.4e-5, 1.0, 1234.5, 0.0)] == ["4.4e-05", "1", "1234", "0"]


def test_prism_advise_prints_one_line_per_number_and_the_advice(capsys):
    """20 hopper episodes (a few seconds): each number line carries what the functions give on the same
    episodes, then the recommendation and its evidence."""
    assert main(["advise", "--env", "mo-hopper-v5", "--episodes", "20", "--seed", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    episodes = uniform_credit.collect_random_episodes(get_env_spec("mo-hopper-v5"), 20, 1)
    want = advise.measure(episodes, 64, 1000)
    assert lines[0].startswith("prism advise: mo-hopper-v5, hidden channel 0 (forward), 20 uniform random")
    fall = re.fullmatch(
        r"episodes end at a fall: yes, (\d+) of 20 terminated before the time limit \(100%\); length (\S+) on "
        r"average \((\d+)-(\d+)\) of a 1000-step limit",
        lines[1],
    )
    assert fall, lines[1]
    ends = want.ends
    assert fall.groups() == (
        str(ends.terminated),
        f"{ends.mean_length:.1f}",
        str(ends.min_length),
        str(ends.max_length),
    )
    eta = re.match(r"uniform's per-step credit: eta = (\S+) ", lines[2])
    assert eta and float(eta[1]) == round(want.eta, 3)
    ratio = re.match(
        r"randomized fit's variance ratio: (\S+) = mean T²\(1-K/T\)σ²/K (\S+) / Var\(R\) (\S+), K = 64 ",
        lines[3],
    )
    assert ratio, lines[3]
    sampling = want.sampling
    assert ratio.groups() == (
        significant(sampling.ratio),
        f"{sampling.estimate_variance:.4g}",
        f"{sampling.return_variance:.4g}",
    )
    assert (
        f"{sampling.long_share:.0%} of segments longer than K (mean T {sampling.mean_length:.1f}); "
        f"K = {sampling.k_for_ratio_one} for a ratio of 1" in lines[3]
    )
    choice = recommend(want)
    assert lines[4] == f"recommendation: {advise.CHOICES[choice.choice]}"
    evidence = [line for line in lines if line.startswith("  evidence: ")]
    assert evidence == [f"  evidence: {advise.evidence_line(row)}" for row in choice.evidence]
    assert "[table1-study walker2d: e-prism / e-uniform]" in evidence[0]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--env", "mo-hoper-v5"], "env.id: unknown env 'mo-hoper-v5'"),
        (["--env", "mo-hopper-v5", "--episodes", "0"], "--episodes: must be positive, got 0"),
        (["--env", "mo-hopper-v5", "--episodes", "-3"], "--episodes: must be positive, got -3"),
        (["--env", "mo-hopper-v5", "--episodes", "x"], "--episodes: invalid int value"),
        (["--episodes", "3"], "required: --env"),
        (["--env", "mo-hopper-v5", "--sparse-channel", "5"], "env.sparse_channel: 5 is out of range"),
        (["--env", "mo-hopper-v5", "agent.lr=1"], "agent.lr: prism advise reads only env.* keys"),
        (["--env", "mo-hopper-v5", "--episodes", "1"], "--episodes: 1 segment is too few"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, names):
    try:
        code = main(["advise", *args])
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("prism advise: error: "), err
    assert names in err
