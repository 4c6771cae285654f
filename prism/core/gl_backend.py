"""Which OpenGL backend MuJoCo renders with, headless, and ``MUJOCO_GL`` values checked before they fail deep.

Without a display MuJoCo needs an offscreen OpenGL backend: ``MUJOCO_GL=egl`` (Mesa's EGL, or a GPU driver's) or
``osmesa`` (software). :func:`choose_gl_backend` keeps a backend named in ``MUJOCO_GL`` and otherwise tries EGL,
then OSMesa, each in a throw-away subprocess (PyOpenGL fixes its platform at first import, so a failed try in this
process would block the next one); none working is one line naming what to install. :func:`check_mujoco_gl`
refuses, before anything is written, a value ``import mujoco`` would reject later.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

from prism.core.errors import ConfigError

__all__ = [
    "GL_BACKENDS",
    "MUJOCO_GL_OFF",
    "check_mujoco_gl",
    "choose_gl_backend",
    "gl_error",
    "is_gl_failure",
]

GL_BACKENDS = ("egl", "osmesa")
"""Headless OpenGL backends tried in order when ``MUJOCO_GL`` names none."""
_KNOWN_GL = ("egl", "osmesa", "glfw")
_INSTALL_HINT = {
    "egl": "Mesa's EGL (Debian/Ubuntu: apt install libegl1 libgl1)",
    "osmesa": "OSMesa (Debian/Ubuntu: apt install libosmesa6)",
    "glfw": "a display and GLFW (pip install glfw)",
}
_PROBE = (
    "import os, sys\n"
    "os.environ['PYOPENGL_PLATFORM'] = sys.argv[1] if sys.argv[1] != 'glfw' else ''\n"
    "import importlib, mujoco\n"
    "ctx = importlib.import_module('mujoco.' + sys.argv[1]).GLContext(8, 8)\n"
    "ctx.make_current()\n"
    # A context object is not enough: GLFW without a display hands one out (with warnings) and MuJoCo fails
    # only when it makes its render context, as gymnasium's renderer does at the first frame.
    "model = mujoco.MjModel.from_xml_string('<mujoco/>')\n"
    "mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150).free()\n"
    "ctx.free()\n"
)


def _probe(backend: str) -> bool:
    """Whether MuJoCo can open an offscreen ``backend`` context (tried in a subprocess, see the module doc)."""
    env = {**os.environ, "MUJOCO_GL": backend}
    env.pop("PYOPENGL_PLATFORM", None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, backend], env=env, capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


MUJOCO_GL_OFF = ("disable", "disabled", "off", "false", "0")
"""``MUJOCO_GL`` values with which MuJoCo imports without any OpenGL (training needs none)."""


def _mujoco_gl_backends() -> tuple[str, ...]:
    """The OpenGL backends ``MUJOCO_GL`` may name on this platform (mujoco 3.x's list)."""
    platform_backends = {"Linux": ("egl", "osmesa", "glx"), "Windows": ("wgl",), "Darwin": ("cgl",)}
    return (*platform_backends.get(platform.system(), ()), "glfw")


def check_mujoco_gl() -> None:
    """Refuse, in one line naming it, a ``MUJOCO_GL`` that MuJoCo itself rejects.

    ``import mujoco`` accepts a backend of this platform, a value that turns OpenGL off (:data:`MUJOCO_GL_OFF`)
    or on at its default (``enable``, ``on``, ``true``, ``1``, empty), and raises ``RuntimeError: invalid value
    for environment variable MUJOCO_GL`` on anything else. It reads the variable at its first import, at a run's
    first MuJoCo env, deep inside a fit that has already made its run folder: a typo there ended in a traceback
    and an empty folder. The CLI checks first."""
    value = os.environ.get("MUJOCO_GL", "")
    accepted = (*MUJOCO_GL_OFF, "", "enable", "enabled", "on", "true", "1", *_mujoco_gl_backends())
    if value.strip().lower() not in accepted:
        raise ConfigError(
            f"MUJOCO_GL: {value!r} is not a value MuJoCo accepts; name a backend "
            f"({', '.join(_mujoco_gl_backends())}), 'disable' for none, or unset it"
        )


def choose_gl_backend() -> str:
    """The OpenGL backend MuJoCo renders with, set in ``MUJOCO_GL`` (and ``PYOPENGL_PLATFORM``) for this process.

    A backend already named in ``MUJOCO_GL`` is kept (and checked); otherwise EGL, then OSMesa. Raises
    :class:`~prism.core.errors.ConfigError` naming what to install when none renders; when the backend the user
    named fails, the line also says which other backend renders here (``try MUJOCO_GL=egl``). A value MuJoCo
    rejects (:func:`check_mujoco_gl`) or one that turns its rendering off (``disable``) is refused rather than
    silently replaced: the user asked for something rendering cannot honour."""
    check_mujoco_gl()
    requested = os.environ.get("MUJOCO_GL", "").strip().lower()
    if requested in MUJOCO_GL_OFF:
        raise ConfigError(
            f"MUJOCO_GL: {os.environ['MUJOCO_GL']!r} turns MuJoCo's rendering off; unset it to let prism pick "
            f"({', then '.join(GL_BACKENDS)}), or name a backend ({', '.join(_KNOWN_GL)})"
        )
    candidates = (requested,) if requested in _KNOWN_GL else GL_BACKENDS
    for backend in candidates:
        if _probe(backend):
            os.environ["MUJOCO_GL"] = backend
            if backend != "glfw" and "OpenGL" not in sys.modules:
                os.environ["PYOPENGL_PLATFORM"] = backend
            return backend
    if requested in _KNOWN_GL:
        working = next((b for b in GL_BACKENDS if b != requested and _probe(b)), None)
        instead = f", or try MUJOCO_GL={working} (it renders on this machine)" if working is not None else ""
        instead = instead or f", or try MUJOCO_GL=egl after installing {_INSTALL_HINT['egl']}"
        raise ConfigError(
            f"MUJOCO_GL: MuJoCo cannot render with {requested} here; install {_INSTALL_HINT[requested]}{instead}"
        )
    tried, need = ", ".join(candidates), " or ".join(_INSTALL_HINT[b] for b in candidates)
    raise ConfigError(
        f"MUJOCO_GL: no OpenGL backend could render headless (tried {tried}); install {need}, then run again "
        "(or set MUJOCO_GL to a working backend)"
    )


def is_gl_failure(err: BaseException) -> bool:
    """Whether ``err`` is how an OpenGL backend that cannot render shows up: PyOpenGL without its platform library
    (no OSMesa: ``'NoneType' object has no attribute 'glGetError'``), ``mujoco.FatalError`` (GLFW without a
    display, EGL without a device), or an import error of PyOpenGL / a GL binding."""
    kind, text = type(err), str(err)
    if kind.__name__ == "FatalError" and kind.__module__.startswith("mujoco"):
        return True
    if isinstance(err, AttributeError) and "glGetError" in text:
        return True
    if isinstance(err, ImportError) and any(name in text for name in ("OpenGL", "EGL", "OSMesa", "glfw")):
        return True
    return "OpenGL" in text or kind.__module__.split(".")[0] in ("OpenGL", "glfw")


def gl_error(err: BaseException) -> ConfigError:
    """A GL failure met while rendering, in one line naming the backend and what to do."""
    backend = os.environ.get("MUJOCO_GL", "") or "the default backend"
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    hint = _INSTALL_HINT.get(backend, f"{_INSTALL_HINT['egl']} or {_INSTALL_HINT['osmesa']}")
    return ConfigError(
        f"MUJOCO_GL: MuJoCo cannot render with {backend} ({type(err).__name__}: {first}); install {hint}, or "
        "try MUJOCO_GL=egl"
    )
