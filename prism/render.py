"""``prism render RUN_DIR``: watch a trained policy. Rolls it out headless and writes a video (MP4 or GIF,
through imageio) and a contact-sheet PNG (a row per rollout, frames evenly spaced over its episode).

Frames come from the env's own renderer (``render_mode="rgb_array"``; MuJoCo envs through gymnasium's
offscreen renderer, with the headless OpenGL backend :func:`prism.core.gl_backend.choose_gl_backend` picks).

The default preferences are the final front's extreme ones (per objective, the weight whose policy had the
best mean return on it, read from ``front.csv``; the corners of the simplex when the run has no front)
plus the balanced one (equal weights). Actions are the deterministic policy's, as in evaluation.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prism.core.errors import ConfigError
from prism.core.gl_backend import choose_gl_backend, gl_error, is_gl_failure

__all__ = ["Clip", "RenderResult", "choose_gl_backend", "default_weights", "parse_weights", "render_run"]

EXTRA = "prism-morl[render]"
"""The optional extra that brings imageio and imageio-ffmpeg."""


def _renders_with_mujoco(env_id: str) -> bool:
    """Whether gymnasium builds ``env_id`` from a MuJoCo module (read from its registration, without importing
    the env: importing gymnasium's MuJoCo renderer fixes the OpenGL backend at once)."""
    import gymnasium as gym
    import mo_gymnasium  # noqa: F401  (registers the mo- ids)

    try:
        entry = gym.spec(env_id.rpartition(":")[2]).entry_point
    except gym.error.Error:
        return False
    where = entry if isinstance(entry, str) else getattr(entry, "__module__", "")
    return "mujoco" in str(where).lower()


def _imageio() -> Any:
    try:
        import imageio.v2 as imageio
    except ImportError:
        raise ConfigError(f"--out: prism render needs imageio: pip install '{EXTRA}'") from None
    return imageio


@dataclass
class Clip:
    """One rendered rollout: its preference, episode index, reset seed, frames and returns."""

    weight: np.ndarray
    episode: int
    seed: int
    frames: np.ndarray
    """``[T, H, W, 3]`` uint8, the frame after reset then one per env step."""
    discounted_return: np.ndarray
    undiscounted_return: np.ndarray


@dataclass
class RenderResult:
    """What :func:`render_run` made: the clips and the files written."""

    clips: list[Clip]
    video: Path
    contact_sheet: Path
    fps: float
    weights: np.ndarray
    """``[K, L]``: the preferences rendered."""
    objective_names: tuple[str, ...] = ()
    """The env's objectives, in the order of the weights and returns."""


def default_weights(run_dir: Path, n_objectives: int) -> np.ndarray:
    """``[K, L]``: the final front's extreme preferences (per objective, the weight of the front point with the
    best mean discounted return on it, from ``front.csv``; the simplex corners without one) and the balanced
    one, without duplicates."""
    extremes: list[np.ndarray] = []
    path = Path(run_dir) / "front.csv"
    if path.is_file():
        with path.open(newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("on_front") == "1"]
        if rows:
            names = [k.removeprefix("weight_") for k in rows[0] if k.startswith("weight_")]
            for name in names:
                best = max(rows, key=lambda r, n=name: float(r[f"discounted_return_mean_{n}"]))
                extremes.append(np.array([float(best[f"weight_{n}"]) for n in names]))
    if not extremes:
        extremes = list(np.eye(n_objectives))
    weights: list[np.ndarray] = []
    for w in [*extremes, np.full(n_objectives, 1.0 / n_objectives)]:
        if not any(np.allclose(w, seen) for seen in weights):
            weights.append(w)
    return np.stack(weights)


def parse_weights(items: list[str]) -> np.ndarray:
    """``--weights 1,0 0.5,0.5`` -> ``[K, L]``, each row normalised to sum 1; one line naming a bad item."""
    rows = []
    for item in items:
        try:
            row = np.array([float(x) for x in item.split(",")], dtype=np.float64)
        except ValueError:
            raise ConfigError(f"--weights: {item!r} is not a comma-separated list of numbers") from None
        if (row < 0).any() or not np.isfinite(row).all() or row.sum() <= 0:
            raise ConfigError(f"--weights: {item!r} must be non-negative with a positive sum")
        rows.append(row / row.sum())
    if len({len(r) for r in rows}) != 1:
        raise ConfigError("--weights: every preference needs the same number of entries")
    return np.stack(rows)


def parse_size(text: str) -> tuple[int, int]:
    """``--size 320x240`` -> ``(320, 240)``."""
    try:
        width, height = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise ConfigError(f"--size: {text!r} is not WIDTHxHEIGHT, e.g. 320x240") from None
    if width < 16 or height < 16:
        raise ConfigError(f"--size: {text!r} is too small (at least 16x16)")
    return width, height


def _rollout(run, env, weight: np.ndarray, seed: int, gamma: float, max_steps: int | None) -> Clip:
    obs, _ = env.reset(seed=seed)
    frames = [env.render()]
    n = run.spec.n_objectives
    discounted, undiscounted, discount = np.zeros(n), np.zeros(n), 1.0
    steps, done = 0, False
    while not done and (max_steps is None or steps < max_steps):
        obs, reward, terminated, truncated, _ = env.step(run.act(obs, weight))
        reward = np.asarray(reward, dtype=np.float64)
        discounted += discount * reward
        undiscounted += reward
        discount *= gamma
        frames.append(env.render())
        steps += 1
        done = bool(terminated or truncated)
    return Clip(weight, 0, seed, np.stack(frames), discounted, undiscounted)


def _label(clip: Clip, names: list[str]) -> str:
    w = ", ".join(f"{x:.2f}" for x in clip.weight)
    r = ", ".join(f"{name} {x:.1f}" for name, x in zip(names, clip.undiscounted_return))
    return f"w = ({w})  ep {clip.episode}  {len(clip.frames) - 1} steps\nreturn: {r}"


def write_contact_sheet(clips: list[Clip], names: list[str], path: Path, columns: int = 6) -> Path:
    """A PNG with one row per clip: ``columns`` frames evenly spaced over its episode, labelled with the
    preference, episode length and undiscounted returns."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height, width = clips[0].frames.shape[1:3]
    scale = 1.6 / height
    fig, axes = plt.subplots(
        len(clips),
        columns,
        figsize=(columns * width * scale, len(clips) * (height * scale + 0.45)),
        squeeze=False,
    )
    for row, clip in zip(axes, clips):
        picks = np.linspace(0, len(clip.frames) - 1, columns).round().astype(int)
        for ax, t in zip(row, picks):
            ax.imshow(clip.frames[t])
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_xlabel(f"t = {t}", fontsize=7)
        row[0].set_title(_label(clip, names), fontsize=7, loc="left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def check_writer(path: Path, width: int, height: int) -> None:
    """Refuse, before any rollout, a video that cannot be written: no imageio, an MP4 without imageio-ffmpeg,
    or an MP4 of odd size (H.264 in yuv420p, what players take, halves the colour resolution)."""
    _imageio()
    if path.suffix.lower() != ".mp4":
        return
    try:
        import imageio_ffmpeg  # noqa: F401  (imageio's MP4 writer)
    except ImportError:
        raise ConfigError(
            f"--out: writing {path.suffix} needs imageio-ffmpeg: pip install '{EXTRA}' (or --out <name>.gif)"
        ) from None
    if width % 2 or height % 2:
        raise ConfigError(f"--size: an MP4 needs an even width and height, got {width}x{height}")


def write_video(clips: list[Clip], path: Path, fps: float) -> Path:
    """The clips one after the other as an MP4 (needs imageio-ffmpeg) or a GIF (by ``path``'s suffix)."""
    imageio = _imageio()
    frames = np.concatenate([clip.frames for clip in clips])
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".gif":
        imageio.mimsave(path, list(frames), duration=1000.0 / fps, loop=0)
    else:
        # macro_block_size=1: keep the frame size as rendered (imageio would resize to multiples of 16).
        imageio.mimsave(path, list(frames), fps=fps, macro_block_size=1)
    return path


def _render_clips(
    run,
    weights: np.ndarray,
    episodes: int,
    seed: int | None,
    width: int,
    height: int,
    max_steps: int | None,
    chosen: bool,
) -> tuple[list[Clip], Any]:
    """The rollouts of :func:`render_run` (the env is closed, returned for its metadata)."""
    from prism.evaluation.rollout import pair_seeds

    probe_env = run.spec.make()
    modes = probe_env.metadata.get("render_modes") or []
    probe_env.close()
    if "rgb_array" not in modes:
        raise ConfigError(f"env.id: {run.spec.id} cannot render frames (no rgb_array render mode)")
    try:
        env = run.spec.make(render_mode="rgb_array", width=width, height=height)
    except TypeError:  # an env that renders but takes no width/height (not MuJoCo)
        env = run.spec.make(render_mode="rgb_array")
    if not chosen and getattr(env.unwrapped, "mujoco_renderer", None) is not None:
        try:  # gymnasium opens the GL context at the first render(), reading MUJOCO_GL then
            choose_gl_backend()
        except ConfigError:
            env.close()
            raise
    cfg = run.eval_config()
    base_seed = cfg.reset_seed() if seed is None else int(seed)
    seeds = pair_seeds(base_seed, len(weights) * episodes)
    clips = []
    try:
        for k, weight in enumerate(weights):
            for e in range(episodes):
                clip = _rollout(run, env, weight, seeds[k * episodes + e], cfg.gamma, max_steps)
                clip.episode = e
                clips.append(clip)
    finally:
        env.close()
    return clips, env


SECONDS_PER_FRAME = (0.005, 0.02)
"""A frame's cost, policy step and MuJoCo render at 320×240, low and high: EGL on a GPU to OSMesa's software
rasteriser (an order-of-magnitude guess for the estimate, not a benchmark), scaled by the frame's pixels."""


def render_estimate(clips: int, max_frames: int, width: int, height: int, gif: bool) -> str:
    """The line ``prism render`` prints before it starts: at most ``clips × max_frames`` frames (an episode
    that ends early has fewer), roughly how long they take (:data:`SECONDS_PER_FRAME`) and how big the file
    is at most: a GIF stores each frame as one palette byte per pixel before LZW compression (which shrinks
    MuJoCo's flat-shaded frames a few times); an MP4 is H.264, a small fraction of that."""
    frames = clips * max_frames
    scale = width * height / (320 * 240)
    low, high = (frames * t * scale for t in SECONDS_PER_FRAME)
    raw_mb = frames * width * height / 1e6
    size = (
        f"a GIF of at most {raw_mb:.0f} MB" if gif else f"an MP4 of well under {max(raw_mb / 10, 1):.0f} MB"
    )
    return (
        f"prism render: {clips} rollout{'s' if clips != 1 else ''} of at most {max_frames} frames at "
        f"{width}x{height}: roughly {_duration(low)}–{_duration(high)}, {size} (fewer frames where episodes end)"
    )


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def render_run(
    run_dir: str | Path,
    *,
    weights: np.ndarray | None = None,
    episodes: int = 1,
    seed: int | None = None,
    out: str | Path | None = None,
    width: int = 320,
    height: int = 240,
    max_steps: int | None = None,
    columns: int = 6,
) -> RenderResult:
    """Render the policy of the run in ``run_dir`` for each of ``weights`` (``[K, L]``, default
    :func:`default_weights`) and ``episodes`` episodes; write the video to ``out`` (default
    ``<run_dir>/render/rollouts.mp4``; ``.gif`` for a GIF) and the contact sheet beside it
    (``<stem>_sheet.png``). Episode ``e`` of weight ``k`` resets with the ``k·episodes + e``-th of
    :func:`~prism.evaluation.rollout.pair_seeds` of ``seed`` (default: the run's evaluation reset seed)."""
    from prism.api import PopulationFolder, load_run

    if episodes < 1:
        raise ConfigError(f"--episodes: must be at least 1, got {episodes}")
    out_path = Path(out) if out is not None else Path(run_dir) / "render" / "rollouts.mp4"
    if out_path.suffix.lower() not in (".mp4", ".gif"):
        raise ConfigError(f"--out: {str(out_path)!r} must end in .mp4 or .gif")
    check_writer(out_path, width, height)  # before any work: a missing extra is one line at once
    try:
        run = load_run(run_dir)
    except PopulationFolder as err:  # render has no member option: a member is rendered from its own folder
        folders = ", ".join(f"{err.run_dir / f'seed{seed}'} (seed {seed})" for seed in err.seeds)
        raise ConfigError(
            f"run_dir: {err.run_dir} is a population of {len(err.seeds)} members; render one member's "
            f"folder: {folders}"
        ) from None
    n = run.spec.n_objectives
    weights = default_weights(run.run_dir, n) if weights is None else np.asarray(weights, dtype=np.float64)
    if weights.ndim != 2 or weights.shape[1] != n:
        raise ConfigError(
            f"--weights: each preference needs {n} numbers ({', '.join(run.spec.objective_names)})"
        )
    chosen = False
    if _renders_with_mujoco(run.spec.id):
        # Before the first MuJoCo env is built: importing gymnasium's MuJoCo renderer reads MUJOCO_GL and
        # imports PyOpenGL for it, and a backend that cannot load (OSMesa missing) fails right there.
        choose_gl_backend()
        chosen = True
    limit = run.spec.max_episode_steps if max_steps is None else min(max_steps, run.spec.max_episode_steps)
    # Said before the rollouts (stdout: stderr is kept to the one-line errors): a 100-rollout GIF is minutes.
    gif = out_path.suffix.lower() == ".gif"
    print(render_estimate(len(weights) * episodes, limit + 1, width, height, gif), flush=True)
    try:
        clips, env = _render_clips(run, weights, episodes, seed, width, height, max_steps, chosen)
    except ConfigError:
        raise
    except Exception as err:  # a GL backend that passed the checks and failed anyway: still one line
        if is_gl_failure(err):
            raise gl_error(err) from None
        raise
    fps = float(env.metadata.get("render_fps") or 30)
    video = write_video(clips, out_path, fps)
    sheet = write_contact_sheet(
        clips, list(run.spec.objective_names), out_path.with_name(f"{out_path.stem}_sheet.png"), columns
    )
    return RenderResult(clips, video, sheet, fps, weights, tuple(run.spec.objective_names))
