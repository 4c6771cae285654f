"""``import prism`` from the folder that holds a clone named ``prism`` imports the installed package, not the
clone's root folder as an empty namespace package (issue 64, part 4).

setuptools installs a flat-layout project in editable mode either as an import hook (a meta-path finder that
Python consults only after its path search, which finds ``./prism/``, the clone, first) or, where the package
root is named (``[tool.setuptools] package-dir = {"" = "."}``), as a static ``.pth`` that puts the project folder
on ``sys.path``; there the path search finds the regular package ``prism/__init__.py``, which wins over a
namespace portion found earlier."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = "import prism; print(prism.__file__)"


def _env() -> dict[str, str]:
    """The environment without PYTHONPATH (which would put a prism/ first whatever the install does)."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def test_an_editable_install_is_a_static_pth_and_the_clone_folder_does_not_shadow_it(tmp_path):
    """Build the editable wheel of a copy of the project in a folder named ``prism`` (pip's PEP 660 build, its
    backend called directly), install its top-level files in a site folder, and import prism from the clone's
    parent folder: the installed package's file, not a namespace package (``__file__`` None)."""
    try:
        import setuptools
    except ImportError:
        pytest.skip("setuptools, the build backend of pyproject.toml, is not importable here")
    if int(setuptools.__version__.split(".")[0]) < 68:
        pytest.skip(
            f"pyproject.toml asks for setuptools >= 68; this interpreter has {setuptools.__version__}"
        )
    clone = tmp_path / "clones" / "prism"
    clone.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, clone / name)
    shutil.copytree(ROOT / "prism", clone / "prism", ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run(
        [sys.executable, "-c", "import setuptools.build_meta as b; print(b.build_editable('dist'))"],
        cwd=clone, env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    wheel = clone / "dist" / build.stdout.strip().splitlines()[-1]
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        top = [name for name in archive.namelist() if "/" not in name]
        assert not [name for name in top if "finder" in name], f"an import-hook editable install: {top}"
        (pth,) = [name for name in top if name.endswith(".pth")]
        assert archive.read(pth).decode().strip() == str(clone)  # one path line, no import hook
        archive.extractall(site, members=top)
    # -S: only the site folder above, not this interpreter's own site-packages (and its own prism install)
    probe = f"import site; site.addsitedir({str(site)!r}); {PROBE}"
    out = subprocess.run(
        [sys.executable, "-S", "-c", probe], cwd=clone.parent, env=_env(), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == str(clone / "prism" / "__init__.py")


def test_this_trees_editable_install_is_not_shadowed_by_a_folder_named_prism(tmp_path):
    """The install this test runs under, where it is an editable install of this tree: from a folder holding a
    link named ``prism`` to this tree, ``import prism`` gives this tree's package."""
    # With the root on sys.path, the source tree's own prism_morl.egg-info (a build by-product) is a distribution
    # too, listed before site-packages' one: read the installed one, which records how it was installed.
    installed = [d for d in metadata.distributions(name="prism-morl") if d.read_text("direct_url.json")]
    if not installed:
        pytest.skip("prism-morl is not installed by pip; the wheel test above covers the layout")
    direct = json.loads(installed[0].read_text("direct_url.json") or "{}")
    source = direct.get("url", "")
    if (
        not direct.get("dir_info", {}).get("editable")
        or Path(source.removeprefix("file://")).resolve() != ROOT
    ):
        pytest.skip(f"prism-morl is not installed editable from this tree ({source or 'no direct_url.json'}); "
                    "the wheel test above covers the layout")  # fmt: skip
    (tmp_path / "prism").symlink_to(ROOT, target_is_directory=True)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, env=_env(), capture_output=True, text=True
    )
    assert out.stdout.strip() == str(ROOT / "prism" / "__init__.py"), (
        f"import prism gave {out.stdout.strip() or out.stderr[-500:]}: this editable install predates "
        "pyproject.toml's package-dir; install it again (pip install --no-deps -e .)"
    )


def test_the_repository_root_exposes_no_module_but_prism():
    """The editable install's .pth puts the repository root on sys.path: it must hold no importable module or
    regular package other than prism (folders without __init__.py are at most namespace portions, which any
    installed module of the same name wins against)."""
    exposed = [p.name for p in ROOT.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()]
    assert exposed == ["prism"]
