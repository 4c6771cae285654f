"""``prism fit --overwrite``: the folder's previous contents are kept until the new run has started.

Emptying the folder first would lose them to a start that fails: bad input that only shows once the run is
built (a replay buffer the machine cannot hold, an env that does not make), a crash, or a Ctrl-C during
start-up. So they are moved into a hidden folder inside the run folder (a rename on the same file system:
instant, whatever their size) and deleted only once the new run has saved its first checkpoint (from then on
it can be resumed); a start that fails before that removes what it wrote and moves them back, leaving the
folder as it was.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ASIDE = ".prism-overwritten"
"""The hidden folder, inside the run folder, that holds the previous contents while the new run starts."""

SETTING_ASIDE = f"{ASIDE}.new"
"""Where the previous contents go one by one before the folder is renamed to :data:`ASIDE`: found only in a
folder whose ``--overwrite`` was killed mid-move, some of the old run in it and the rest beside it."""


def check_no_split_contents(run_dir: Path, *, key: str) -> None:
    """A one-line :class:`~prism.core.errors.ConfigError` naming ``key`` when an ``--overwrite`` of ``run_dir``
    was killed while it moved the previous contents aside: the old run is then split between the folder and
    :data:`SETTING_ASIDE`, and neither half is a run to resume. Nothing is moved: the user chooses."""
    holder = run_dir / SETTING_ASIDE
    if holder.is_dir():
        from prism.core.errors import ConfigError

        raise ConfigError(
            f"{key}: {str(holder)!r} holds part of what {str(run_dir)!r} held before an --overwrite stopped "
            "while setting it aside; rerun that --overwrite to finish it, or move the folder's contents back "
            "into the run folder to keep the old run"
        )


def remove_contents(folder: Path, keep: Path | None = None) -> None:
    """Delete everything in ``folder`` but ``keep`` (a link is removed, never followed)."""
    for child in folder.iterdir():
        if child == keep:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


class PreviousContents:
    """A run folder's previous contents, set aside while a new run starts in the folder."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.aside = run_dir / ASIDE

    @classmethod
    def set_aside(cls, run_dir: Path) -> PreviousContents:
        """Move everything in ``run_dir`` into its hidden folder (an older one left by a killed start comes
        along, inside it: it belongs to the previous contents)."""
        kept = cls(run_dir)
        holder = run_dir / SETTING_ASIDE  # left by a start killed while it set aside: part of the contents
        children = [child for child in run_dir.iterdir() if child != holder]
        holder.mkdir(exist_ok=True)
        for child in children:
            child.rename(holder / child.name)
        holder.rename(kept.aside)
        return kept

    def drop(self) -> None:
        """The new run has saved its first checkpoint: the previous contents go."""
        if self.aside.exists():
            shutil.rmtree(self.aside)

    def restore(self) -> None:
        """The new run did not start: remove what it wrote, and move the previous contents back."""
        if not self.aside.is_dir():
            return
        remove_contents(self.run_dir, keep=self.aside)
        for child in list(self.aside.iterdir()):
            child.rename(self.run_dir / child.name)
        self.aside.rmdir()
