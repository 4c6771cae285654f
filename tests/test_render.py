"""``prism render`` (issue 29, item 1): headless MuJoCo frames of a trained policy, a video and a contact sheet;
one clear line for what cannot work (no GL backend, missing extra, bad options)."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from toy_runs import toy_run

import prism.core.gl_backend as gl_backend
import prism.render as render
from prism.cli import USAGE_ERROR, main
from prism.core.errors import ConfigError

CONF = Path(__file__).resolve().parents[1] / "conf"
HOPPER_TINY = [
    "env.id=mo-hopper-v5",
    "loop.cycles=1",
    "loop.steps_per_cycle=150",
    "loop.checkpoint_every=150",
    "agent.learning_starts=100",
    "agent.batch_size=32",
    "agent.buffer_size=1000",
    "agent.actor_hidden=[32,32]",
    "agent.critic_hidden=[32,32]",
    "agent.log_every=100",
    "eval.every=150",
    "eval.num_weights=3",
    "eval.episodes=1",
    "eval.final.num_weights=3",
    "eval.final.episodes=1",
    "figures=false",
]


@pytest.fixture(scope="module")
def hopper_run(tmp_path_factory) -> Path:
    """A quickstart-shaped run on mo-hopper-v5 at a tiny budget (the baseline: no reward fit)."""
    run_dir = tmp_path_factory.mktemp("render") / "run"
    files = [str(CONF / "quickstart.yaml"), str(CONF / "method" / "baseline.yaml")]
    assert main(["fit", "--config", *files, *HOPPER_TINY, f"run_dir={run_dir}"]) == 0
    return run_dir


@pytest.fixture
def gl_env(monkeypatch):
    """Let render choose the backend (the suite sets MUJOCO_GL=disable); the environment is restored after."""
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)


def test_a_short_render_gives_frames_of_the_stated_size_that_change_over_time(hopper_run, tmp_path, gl_env):
    import imageio.v2 as imageio

    out = tmp_path / "clips.mp4"
    result = render.render_run(
        hopper_run, weights=np.array([[1.0, 0, 0], [0, 0, 1.0]]), out=out, width=96, height=64, max_steps=25
    )
    assert len(result.clips) == 2
    for clip in result.clips:
        steps = len(clip.frames) - 1
        assert 1 <= steps <= 25
        assert clip.frames.shape == (steps + 1, 64, 96, 3) and clip.frames.dtype == np.uint8
        # the hopper moves: late frames differ from the first, and not just by a pixel or two
        change = np.abs(clip.frames[-1].astype(int) - clip.frames[0].astype(int)).mean()
        assert change > 0.05, change
        assert clip.frames.std() > 5  # a picture, not a blank buffer
    video = imageio.mimread(result.video)
    assert len(video) == sum(len(c.frames) for c in result.clips)
    assert video[0].shape[:2] == (64, 96)
    sheet = imageio.imread(result.contact_sheet)
    assert result.contact_sheet == tmp_path / "clips_sheet.png" and sheet.ndim == 3 and sheet.shape[1] > 400


def test_the_cli_renders_the_default_preferences_to_a_gif(hopper_run, tmp_path, gl_env, capsys):
    out = tmp_path / "roll.gif"
    args = ["render", str(hopper_run), "--out", str(out), "--size", "48x32", "--max-steps", "5"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    expected = render.default_weights(hopper_run, 3)
    assert printed.count(" episode 0: ") == len(expected) and f"video          {out}" in printed
    # each return named after its objective, as on the contact sheet (issue 50, item 10)
    estimate, first = printed.splitlines()[:2]  # the estimate comes before the rollouts (issue 64)
    assert estimate.startswith(
        f"prism render: {len(expected)} rollouts of at most 6 frames at 48x32: roughly "
    )
    assert re.search(r" steps, return forward -?[\d.e+-]+, jump -?[\d.e+-]+, energy -?[\d.e+-]+$", first), (
        first
    )
    import imageio.v2 as imageio

    frames = imageio.mimread(out)
    assert frames[0].shape[:2] == (32, 48) and len(frames) <= 6 * len(expected)


def test_default_weights_are_the_fronts_extremes_and_the_balanced_one(tmp_path):
    rows = [  # weight_a, weight_b, mean_a, mean_b, on_front
        (1.0, 0.0, 10.0, 1.0, 1),
        (0.7, 0.3, 8.0, 5.0, 1),
        (0.2, 0.8, 2.0, 9.0, 1),
        (0.0, 1.0, 12.0, 12.0, 0),  # off the front: never chosen
    ]
    with (tmp_path / "front.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            ["weight_a", "weight_b", "discounted_return_mean_a", "discounted_return_mean_b", "on_front"]
        )
        writer.writerows(rows)
    np.testing.assert_allclose(render.default_weights(tmp_path, 2), [[1.0, 0.0], [0.2, 0.8], [0.5, 0.5]])
    # without a front: the simplex corners and the balanced weight
    np.testing.assert_allclose(render.default_weights(tmp_path / "none", 2), [[1, 0], [0, 1], [0.5, 0.5]])


def test_weights_and_size_options_are_parsed_or_refused_in_one_line():
    np.testing.assert_allclose(render.parse_weights(["3,1", "0,2"]), [[0.75, 0.25], [0, 1]])
    for bad, word in (
        (["a,b"], "not a comma"),
        (["-1,2"], "non-negative"),
        (["1,0", "1,0,0"], "same number"),
    ):
        with pytest.raises(ConfigError, match=word):
            render.parse_weights(bad)
    assert render.parse_size("64x48") == (64, 48)
    with pytest.raises(ConfigError, match="--size"):
        render.parse_size("64")
    with pytest.raises(ConfigError, match="^--size: an MP4 needs an even width and height, got 65x48"):
        render.check_writer(Path("clip.mp4"), 65, 48)
    render.check_writer(Path("clip.gif"), 65, 48)  # a GIF takes any size


def test_no_gl_backend_is_one_line_naming_what_to_install_exit_2(hopper_run, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    tried = []
    monkeypatch.setattr(gl_backend, "_probe", lambda backend: tried.append(backend) or False)
    out = tmp_path / "x.gif"
    assert main(["render", str(hopper_run), "--out", str(out)]) == USAGE_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prism: error: MUJOCO_GL: no OpenGL backend")
    assert "libegl1" in err[0] and "libosmesa6" in err[0] and tried == ["egl", "osmesa"]
    assert not out.exists()


def test_a_missing_render_extra_is_one_line_naming_it(hopper_run, monkeypatch, capsys):
    import builtins

    real_import = builtins.__import__

    def no_imageio(name, *args, **kwargs):
        if name.startswith("imageio"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_imageio)
    assert main(["render", str(hopper_run)]) == USAGE_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["prism: error: --out: prism render needs imageio: pip install 'prism-morl[render]'"]
    assert not (hopper_run / "render").exists()


def test_an_env_without_frames_is_refused(tmp_path, monkeypatch, capsys):
    from toy_runs import toy_run

    run_dir = tmp_path / "toy"
    files = [str(CONF / "quickstart.yaml"), str(CONF / "method" / "baseline.yaml")]
    overrides = toy_run(
        {"loop.cycles": 1, "figures": "false"}, resymnet=False
    )  # (baseline: no ReSymNet keys)
    assert main(["fit", "--config", *files, *overrides, f"run_dir={run_dir}"]) == 0
    capsys.readouterr()
    assert main(["render", str(run_dir), "--out", str(tmp_path / "t.gif")]) == USAGE_ERROR
    assert "cannot render frames" in capsys.readouterr().err


# ---- every GL backend failure is one line (issue 50, item 1) --------------------------------------------
def test_a_named_backend_that_cannot_render_says_what_to_install_and_what_works_here(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    monkeypatch.setattr(gl_backend, "_probe", lambda backend: backend == "egl")
    with pytest.raises(ConfigError) as info:
        gl_backend.choose_gl_backend()
    assert str(info.value) == (
        "MUJOCO_GL: MuJoCo cannot render with osmesa here; install OSMesa (Debian/Ubuntu: apt install "
        "libosmesa6), or try MUJOCO_GL=egl (it renders on this machine)"
    )
    monkeypatch.setenv("MUJOCO_GL", "glfw")
    monkeypatch.setattr(gl_backend, "_probe", lambda backend: False)
    with pytest.raises(ConfigError, match=r"^MUJOCO_GL: MuJoCo cannot render with glfw here; install a display "
                       r"and GLFW \(pip install glfw\), or try MUJOCO_GL=egl after installing Mesa's EGL"):  # fmt: skip
        gl_backend.choose_gl_backend()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("bogus", "is not a value MuJoCo accepts; name a backend (egl, osmesa, glx, glfw), 'disable' for none, "
         "or unset it"),
        ("egI", "is not a value MuJoCo accepts; name a backend (egl, osmesa, glx, glfw), 'disable' for none, "
         "or unset it"),
        ("disable", "turns MuJoCo's rendering off; unset it to let prism pick (egl, then osmesa), or name a "
         "backend (egl, osmesa, glfw)"),
        ("Off", "turns MuJoCo's rendering off; unset it to let prism pick (egl, then osmesa), or name a "
         "backend (egl, osmesa, glfw)"),
    ],
)  # fmt: skip
def test_a_mujoco_gl_render_cannot_honour_is_refused_in_one_line_not_replaced(
    hopper_run, tmp_path, monkeypatch, capsys, value, says
):
    """``MUJOCO_GL=bogus prism render RUN`` used to try EGL, then OSMesa, as if MUJOCO_GL were unset."""
    if sys.platform != "linux":
        pytest.skip("the backends listed are Linux's")
    monkeypatch.setenv("MUJOCO_GL", value)

    def no_probe(backend):
        raise AssertionError(f"probed {backend} although MUJOCO_GL={value}")

    monkeypatch.setattr(gl_backend, "_probe", no_probe)
    out = tmp_path / "x.gif"
    assert main(["render", str(hopper_run), "--out", str(out)]) == USAGE_ERROR
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"prism: error: MUJOCO_GL: '{value}' {says}"
    assert not out.exists() and os.environ["MUJOCO_GL"] == value


def test_a_mujoco_gl_mujoco_rejects_stops_a_fit_before_its_run_folder(tmp_path, monkeypatch, capsys):
    """``import mujoco`` raises on such a value at the run's first MuJoCo env: that was a traceback, exit 1, and
    an empty run folder. A subprocess checks that MuJoCo itself rejects the value, so the check is MuJoCo's rule."""
    rejected = subprocess.run(
        [sys.executable, "-c", "import mujoco"],
        env={**os.environ, "MUJOCO_GL": "egI"},
        capture_output=True,
        text=True,
    )
    assert rejected.returncode != 0 and "invalid value for environment variable MUJOCO_GL" in rejected.stderr
    monkeypatch.setenv("MUJOCO_GL", "egI")
    run_dir = tmp_path / "run"
    assert main(["fit", "--config", str(CONF / "quickstart.yaml"), f"run_dir={run_dir}"]) == USAGE_ERROR
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("prism: error: MUJOCO_GL: 'egI' is not a value MuJoCo accepts")
    assert not run_dir.exists()
    # every value MuJoCo accepts passes the check (it does not render, so 'disable' is fine for a fit)
    for accepted in ("", "disable", "egl", "osmesa", "glfw", "on"):
        monkeypatch.setenv("MUJOCO_GL", accepted)
        gl_backend.check_mujoco_gl()


@pytest.mark.parametrize(
    "error",
    [
        AttributeError("'NoneType' object has no attribute 'glGetError'"),  # PyOpenGL without libOSMesa
        "mujoco.FatalError",  # GLFW without a display: MuJoCo's render context fails
    ],
)
def test_a_gl_failure_while_rendering_is_one_line_exit_2(hopper_run, tmp_path, monkeypatch, capsys, error):
    import mujoco

    if error == "mujoco.FatalError":
        error = mujoco.FatalError("an OpenGL platform library has not been loaded into this process")
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    monkeypatch.setattr(render, "choose_gl_backend", lambda: "osmesa")  # a backend that passed its check

    def fails(*args, **kwargs):
        raise error

    monkeypatch.setattr(render, "_render_clips", fails)
    out = tmp_path / "x.gif"
    assert main(["render", str(hopper_run), "--out", str(out)]) == USAGE_ERROR
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        f"prism: error: MUJOCO_GL: MuJoCo cannot render with osmesa ({type(error).__name__}: "
    )
    assert line.endswith("install OSMesa (Debian/Ubuntu: apt install libosmesa6), or try MUJOCO_GL=egl")
    assert not out.exists()
    assert not gl_backend.is_gl_failure(ValueError("a bug of ours stays a traceback"))


@pytest.mark.slow  # a subprocess per backend (~10 s each)
@pytest.mark.parametrize("backend", ["osmesa", "glfw"])
def test_prism_render_with_a_backend_this_machine_lacks_is_one_line(hopper_run, tmp_path, backend):
    """The user's commands: ``MUJOCO_GL=osmesa prism render RUN`` without OSMesa (a 61-line traceback ending in
    ``'NoneType' object has no attribute 'glGetError'``) and ``MUJOCO_GL=glfw`` without a display (a 43-line
    ``mujoco.FatalError``). Where the backend does render, the command simply works."""
    env = {**os.environ, "MUJOCO_GL": backend, "PYTHONUNBUFFERED": "1"}
    env.pop("DISPLAY", None)
    env.pop("PYOPENGL_PLATFORM", None)
    out = tmp_path / "x.gif"
    cmd = [
        sys.executable,
        "-m",
        "prism.cli",
        "render",
        str(hopper_run),
        "--max-steps",
        "3",
        "--out",
        str(out),
    ]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if gl_backend._probe(backend):  # this machine has it after all
        assert result.returncode == 0 and out.is_file(), result.stderr[-2000:]
        return
    assert result.returncode == USAGE_ERROR, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"prism: error: MUJOCO_GL: MuJoCo cannot render with {backend} here; install ")
    assert "try MUJOCO_GL=egl" in line and not out.exists()


def test_a_clips_returns_are_its_rollouts_discounted_and_plain_sums_and_the_cli_prints_the_plain(
    hopper_run, tmp_path, gl_env, capsys
):
    """Rendered from the evaluation's reset seeds with its weights, clip k·E + e is evaluation pair (weight k,
    episode e): the same reset seed and episode length, its discounted return Σ γ^t r_t and its undiscounted
    Σ r_t (summed by the evaluation's own batched rollout). `prism render` prints the one it names, the
    undiscounted return."""
    from prism.api import load_run
    from prism.evaluation.rollout import pair_seeds
    from prism.metrics.functional import equally_spaced_weights

    run = load_run(hopper_run)
    expected = run.evaluate(episodes=2)  # the final protocol's 3 weights, 2 episodes each: pair k·2 + e
    weights = equally_spaced_weights(3, 3)
    np.testing.assert_array_equal(weights, expected.weights)
    result = render.render_run(
        hopper_run, weights=weights, episodes=2, out=tmp_path / "c.gif", width=32, height=32
    )
    assert len(result.clips) == 6
    seeds = pair_seeds(run.eval_config().reset_seed(), 6)
    for i, clip in enumerate(result.clips):
        k, e = divmod(i, 2)
        assert (clip.episode, clip.seed) == (e, seeds[i])
        assert len(clip.frames) - 1 == expected.lengths[k, e]
        np.testing.assert_allclose(clip.discounted_return, expected.returns[k, e], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            clip.undiscounted_return, expected.undiscounted_returns[k, e], rtol=1e-5, atol=1e-6
        )
        assert not np.allclose(clip.discounted_return, clip.undiscounted_return)  # γ < 1 over > 1 step
    args = [
        "render",
        str(hopper_run),
        "--out",
        str(tmp_path / "d.gif"),
        "--size",
        "32x32",
        "--episodes",
        "2",
        "--weights",
    ]
    assert main([*args, *(",".join(str(x) for x in w) for w in weights)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if re.search(r" episode [01]: ", line)]
    assert len(lines) == 6
    for line, clip in zip(lines, result.clips, strict=True):
        printed = [float(x) for x in re.findall(r"(?:forward|jump|energy) (-?[\d.e+-]+)", line)]
        np.testing.assert_allclose(printed, clip.undiscounted_return, rtol=1e-3)
        assert not np.allclose(printed, clip.discounted_return, rtol=1e-3)


def test_render_of_a_population_folder_names_its_members_folders(tmp_path):
    # `prism render` has no member option: the line points at the members' own folders, not at load_run(member=)
    from prism.config import load_config, to_yaml

    pop = tmp_path / "pop"
    pop.mkdir()
    overrides = [*toy_run({"seeds": "[3,5]", "seed": None}), f"run_dir={pop}"]
    (pop / "config.yaml").write_text(to_yaml(load_config([CONF / "quickstart.yaml"], overrides)))
    with pytest.raises(ConfigError) as refused:
        render.render_run(pop, out=tmp_path / "x.gif")
    line = str(refused.value)
    assert line == (
        f"run_dir: {pop} is a population of 2 members; render one member's folder: {pop / 'seed3'} (seed 3), "
        f"{pop / 'seed5'} (seed 5)"
    )
