"""Plots of simulation runs (matplotlib, Agg backend, PNG files).

- :func:`plot_accuracy`: test accuracy against virtual time, one line per run, the target
  as a dashed line; every strategy on one chart.
- :func:`plot_timeline`: one row per client: training slices, abandoned work, wasted work,
  offline stretches; idle is the empty background.

- :func:`plot_radar`: every node's polygon on the distorted radar chart of seed 000
  (:mod:`flower_edge.radar`); ``flower-edge plan --plot`` finds it through the entry point
  ``radar`` of the group ``flower_edge.plots``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from flower_edge.errors import InputError
from flower_edge.radar import match_ratios, radar_chart
from simulations.report import RunResult, SpanKind, TimelineSpan, seconds_text

__all__ = ["SPAN_COLOURS", "plot_accuracy", "plot_radar", "plot_timeline"]

#: colour of each timeline span kind
SPAN_COLOURS: dict[SpanKind, str] = {
    "training": "tab:green",
    "abandoned": "tab:red",
    "wasted": "tab:orange",
    "offline": "0.75",
}
_STRATEGY_COLOURS = {
    "edge": "tab:blue",
    "edge-seed": "tab:cyan",
    "fedavg": "tab:gray",
    "fedbuff": "tab:orange",
    "fedasync": "tab:purple",
}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy(results: Sequence[RunResult], path: str | Path) -> Path:
    """Draw accuracy against virtual time for every run on one chart; return ``path``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    try:
        several_seeds = len({r.seed for r in results}) > 1
        for r in results:
            xs = [h.virtual_time for h in r.history]
            ys = [h.accuracy for h in r.history]
            label = f"{r.strategy} (seed {r.seed})" if several_seeds else r.strategy
            ttt = r.time_to_target
            if ttt is not None:
                label += f": target at {seconds_text(ttt)} s"
            ax.plot(
                xs,
                ys,
                label=label,
                color=_STRATEGY_COLOURS.get(r.strategy),
                drawstyle="steps-post",
                linewidth=1.6,
            )
        if results:
            target = results[0].target_accuracy
            ax.axhline(target, color="k", linestyle="--", linewidth=0.8, label=f"target {target}")
            ax.set_title(f"{results[0].scenario}: test accuracy against virtual time")
        ax.set_xlabel("virtual time (s)")
        ax.set_ylabel("test accuracy")
        ax.set_ylim(0.0, 1.0)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return Path(path)


def plot_timeline(
    spans: Sequence[TimelineSpan],
    num_nodes: int,
    path: str | Path,
    *,
    title: str = "client timeline",
    horizon: float | None = None,
    first_id: int = 0,
) -> Path:
    """Draw one row per client (training, abandoned, wasted, offline); return ``path``.

    Parameters
    ----------
    spans : sequence of TimelineSpan
        Spans of every client.
    num_nodes : int
        Number of rows (clients ``0 .. num_nodes - 1``).
    path : str or pathlib.Path
        Output PNG.
    title : str (default: "client timeline")
        Chart title.
    horizon : float, optional
        Right end of the time axis (default: the last span's end).
    first_id : int (default: 0)
        The label of row 0: rows read ``first_id .. first_id + num_nodes - 1`` (the
        simulations pass 1, the node ids of the strategy's log messages).
    """
    from matplotlib.patches import Patch

    plt = _pyplot()
    by_row: dict[tuple[int, SpanKind], list[tuple[float, float]]] = defaultdict(list)
    for s in spans:
        by_row[(s.node, s.kind)].append((s.start, max(s.end - s.start, 0.0)))
    height = min(max(3.5, 0.18 * num_nodes + 2.0), 20.0)
    fig, ax = plt.subplots(figsize=(10, height), dpi=110)
    try:
        for (node, kind), bars in by_row.items():
            ax.broken_barh(bars, (node - 0.4, 0.8), facecolors=SPAN_COLOURS[kind], linewidth=0)
        end = horizon if horizon is not None else max((s.end for s in spans), default=1.0)
        ax.set_xlim(0.0, max(end, 1e-9))
        ax.set_ylim(-0.6, num_nodes - 0.4)
        ax.invert_yaxis()
        ax.set_xlabel("virtual time (s)")
        ax.set_ylabel("client (partition id)" if first_id == 0 else "node id (partition id + 1)")
        if num_nodes <= 30:
            ax.set_yticks(range(num_nodes))
        ax.yaxis.set_major_formatter(lambda y, _: f"{round(y) + first_id}")
        ax.set_title(title)
        handles = [Patch(color=c, label=k) for k, c in SPAN_COLOURS.items()]
        handles.append(Patch(facecolor="white", edgecolor="0.6", label="idle"))
        fig.legend(handles=handles, loc="lower center", ncol=5, frameon=False)
        fig.tight_layout(rect=(0.0, 0.07, 1.0, 1.0))
        fig.savefig(path)
    finally:
        plt.close(fig)
    return Path(path)


def plot_radar(
    evaluations: ArrayLike,
    compute_share: float,
    labels: Sequence[str],
    path: str | Path,
    *,
    order_invariant: bool = False,
    drop_empty_axes: bool = False,
) -> Path:
    """Draw every node's polygon on the distorted radar chart and save it as a PNG.

    Up to 12 nodes each get a colour and a legend entry with its match ratio; beyond that,
    polygons are coloured by match ratio on a colour bar, the best and worst nodes labelled.
    The chart and the ratios follow ``order_invariant`` and ``drop_empty_axes`` as
    :func:`flower_edge.radar.match_ratios` does, so that they are the ratios of
    ``flower-edge plan`` with the same options (its ``--plot`` drew the seed's four axes and
    their ratios whatever the options: found by a new-user probe).

    Parameters
    ----------
    evaluations : array-like, shape (n_nodes, 4)
        Resource evaluations, columns in :data:`flower_edge.radar.AXES` order.
    compute_share : float
        ``p_c`` in ``[0, 1]``.
    labels : sequence of str
        One label (node id) per node.
    path : str or pathlib.Path
        Output file (PNG); its folder must exist.
    order_invariant : bool (default: False)
        Match ratios averaged over every axis order instead of the seed's C, G, M, D.
    drop_empty_axes : bool (default: False)
        Leave out an axis on which no node scores above zero (the seed keeps all four).

    Returns
    -------
    pathlib.Path
        ``path``.

    Raises
    ------
    InputError
        Bad evaluations or share, or a label count that differs from the node count.
    OSError
        ``path`` cannot be written (a folder, a missing folder, no permission); the figure is
        closed all the same. ``flower-edge plan --plot`` checks the path before computing.
    """
    from matplotlib.colors import Normalize

    plt = _pyplot()
    chart = radar_chart(evaluations, compute_share, drop_empty_axes=drop_empty_axes)
    ratios = match_ratios(
        evaluations,
        compute_share,
        order_invariant=order_invariant,
        drop_empty_axes=drop_empty_axes,
    )
    n = chart.scores.shape[0]
    if len(labels) != n:
        raise InputError(f"labels must have one entry per node ({n}), got {len(labels)}")
    out = Path(path)
    angles = np.asarray(chart.angles)
    lengths = np.asarray(chart.lengths)
    radii = chart.radii()

    def ring(x: NDArray[np.float64], y: NDArray[np.float64]) -> tuple[list[float], list[float]]:
        # closed outline; with two axes the polygon is the right triangle through the centre
        px, py = list(map(float, x)), list(map(float, y))
        if len(px) == 2:
            px, py = [*px, 0.0], [*py, 0.0]
        return [*px, px[0]], [*py, py[0]]

    fig, ax = plt.subplots(figsize=(7.0, 7.0), dpi=110)
    ax.set_aspect("equal")
    ax.axis("off")
    # the chart: axes and the outer (distorted) polygon
    pad = 0.12 * float(lengths.max())
    for angle, length, name in zip(angles, lengths, chart.axes, strict=True):
        x, y = length * math.cos(angle), length * math.sin(angle)
        ax.plot([0, x], [0, y], color="0.55", lw=1.0)
        ax.text(
            (length + pad) * math.cos(angle),
            (length + pad) * math.sin(angle),
            f"{name}\nL={length:.2f}",
            ha="center",
            va="center",
            fontsize=9,
        )
    ox, oy = lengths * np.cos(angles), lengths * np.sin(angles)
    ax.fill(*ring(ox, oy), color="0.92", zorder=0)
    ax.plot(*ring(ox, oy), color="0.4", lw=1.2, ls="--")
    for frac in (0.25, 0.5, 0.75):
        ax.plot(*ring(frac * ox, frac * oy), color="0.8", lw=0.5)

    xs, ys = radii * np.cos(angles), radii * np.sin(angles)
    if n <= 12:
        cmap = plt.get_cmap("tab10" if n <= 10 else "tab20")
        for d in range(n):
            ax.plot(
                *ring(xs[d], ys[d]),
                color=cmap(d),
                lw=1.6,
                marker="o",
                ms=3,
                label=f"{labels[d]}  m={ratios[d]:.3f}",
            )
            ax.fill(*ring(xs[d], ys[d]), color=cmap(d), alpha=0.12)
        ax.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            ncol=min(3, n),
            fontsize=8,
            frameon=False,
        )
    else:
        cmap = plt.get_cmap("viridis")
        top = float(ratios.max()) or 1.0
        order = np.argsort(ratios)  # best drawn last, on top
        for d in order:
            ax.plot(*ring(xs[d], ys[d]), color=cmap(ratios[d] / top), lw=0.8, alpha=0.7)
        sm = plt.cm.ScalarMappable(cmap=cmap, norm=Normalize(0.0, top))
        fig.colorbar(sm, ax=ax, shrink=0.6, pad=0.02, label="match ratio m")
        best, worst = int(order[-1]), int(order[0])
        ax.plot(
            *ring(xs[best], ys[best]),
            color="crimson",
            lw=2.0,
            label=f"best: {labels[best]} (m={ratios[best]:.3f})",
        )
        ax.plot(
            *ring(xs[worst], ys[worst]),
            color="black",
            lw=1.4,
            ls=":",
            label=f"worst: {labels[worst]} (m={ratios[worst]:.3f})",
        )
        ax.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            ncol=2,
            fontsize=8,
            frameon=False,
        )
    reach = lengths + 2.2 * pad  # room for the axis labels
    ex, ey = reach * np.cos(angles), reach * np.sin(angles)
    if len(angles) == 1:  # a single axis: a square frame around the centre
        lim = float(reach.max())
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
    else:
        ax.set_xlim(min(float(ex.min()), -pad), max(float(ex.max()), pad))
        ax.set_ylim(min(float(ey.min()), -pad), max(float(ey.max()), pad))
    ax.set_title(
        f"Distorted radar, {n} node{'' if n == 1 else 's'}  "
        f"(p_c={chart.compute_share:.2f}, p_m={chart.memory_share:.2f})"
    )
    try:
        fig.savefig(out, format="png", bbox_inches="tight")
    finally:  # a failed write (a folder, no permission) must not leak the figure
        plt.close(fig)
    return out
