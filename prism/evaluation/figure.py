"""The Pareto-front figure of an evaluation (TensorBoard ``eval/front``, ``eval_final/front``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prism.evaluation.result import EvalResult

__all__ = ["front_figure"]


def front_figure(result: EvalResult, objective_names: Sequence[str], title: str = ""):
    """A scatter of every policy's mean discounted return, the Pareto front highlighted (one panel per
    pair of objectives). Built on a bare :class:`matplotlib.figure.Figure` (Agg canvas, no pyplot state).

    With two objectives the front is a staircase in its only panel and its points are joined in order; with
    more, a 2-D projection of the front is no curve (joining its points would draw a zig-zag), so the front's
    points are drawn alone."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n_obj = len(objective_names)
    pairs = [(i, j) for i in range(n_obj) for j in range(i + 1, n_obj)]
    fig = Figure(figsize=(4.0 * len(pairs), 3.6))
    FigureCanvasAgg(fig)
    for k, (i, j) in enumerate(pairs):
        ax = fig.add_subplot(1, len(pairs), k + 1)
        ax.scatter(result.mean[:, i], result.mean[:, j], s=10, c="0.7", label="policies")
        front = result.front[np.argsort(result.front[:, i])] if len(result.front) else result.front
        style = "o-" if n_obj == 2 else "o"
        ax.plot(front[:, i], front[:, j], style, ms=4, color="C0", label=f"front ({result.cardinality})")
        ax.set_xlabel(objective_names[i])
        ax.set_ylabel(objective_names[j])
        ax.grid(alpha=0.3)
        if k == 0:
            ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
