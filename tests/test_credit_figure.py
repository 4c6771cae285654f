"""tools/credit_figure.py at tiny sizes: the episode it draws ends in a fall, uniform R/T is flat at R/T, the
conserving curve sums to the episode's return with ReSymNet's shape, and ReSymNet's own curve is the model's."""

from __future__ import annotations

import csv
from collections import defaultdict

import numpy as np
import pytest
from tool_modules import TOOLS, load_tool


def test_the_figures_curves_are_what_each_candidate_shapes(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.syspath_prepend(str(TOOLS))  # it reuses credit_fit_gate's collection and shaping
    tool = load_tool("credit_figure")
    args = [
        "--results",
        str(tmp_path),
        *["--random", "4", "--test", "3", "--max-epochs", "1", "--patience", "1"],
    ]
    assert tool.main(args) == 0
    assert (tmp_path / "credit_at_fall.png").stat().st_size > 10_000
    assert "Command: `python tools/credit_figure.py --results" in (tmp_path / "credit_at_fall.md").read_text()
    columns = defaultdict(lambda: defaultdict(list))
    with open(tmp_path / "credit_at_fall.csv") as f:
        for row in csv.DictReader(f):
            for key in ("true", "uniform", "resymnet", "conserve", "terminated"):
                columns[row["setting"]][key].append(float(row[key]))
    assert set(columns) == {"forward velocity hidden", "control cost hidden"}
    for curves in columns.values():
        true, uniform = np.array(curves["true"]), np.array(curves["uniform"])
        resymnet, conserve = np.array(curves["resymnet"]), np.array(curves["conserve"])
        assert curves["terminated"] == [0.0] * (len(true) - 1) + [1.0]  # one fall, on the last step
        np.testing.assert_allclose(uniform, true.sum() / len(true), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(conserve.sum(), true.sum(), rtol=1e-4, atol=1e-3)
        shift = conserve - resymnet  # one shift over the episode, and not zero: the model's own sum is not R
        np.testing.assert_allclose(shift, shift[0], atol=1e-4)
        assert abs(resymnet.sum() - true.sum()) > 1e-2
    # both panels draw the same episode (same seeds, same random actions): same length
    assert len({len(c["true"]) for c in columns.values()}) == 1
