"""Plots of simulation runs (matplotlib, Agg backend, PNG files).

- :func:`plot_accuracy`: test accuracy against virtual time, one line per run, the target
  as a dashed line; every strategy on one chart.
- :func:`plot_timeline`: one row per client: training slices, abandoned work, wasted work,
  offline stretches; idle is the empty background.

The radar chart of the nodes is drawn by :func:`flower_edge.radar.plot_radar`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulations.report import RunResult, SpanKind, TimelineSpan

__all__ = ["SPAN_COLOURS", "plot_accuracy", "plot_timeline"]

#: colour of each timeline span kind
SPAN_COLOURS: dict[SpanKind, str] = {
    "training": "tab:green",
    "abandoned": "tab:red",
    "wasted": "tab:orange",
    "offline": "0.75",
}
_STRATEGY_COLOURS = {
    "edge": "tab:blue",
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
                label += f": target at {ttt:.0f} s"
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
        ax.set_ylabel("client (partition id)")
        if num_nodes <= 30:
            ax.set_yticks(range(num_nodes))
        ax.set_title(title)
        handles = [Patch(color=c, label=k) for k, c in SPAN_COLOURS.items()]
        handles.append(Patch(facecolor="white", edgecolor="0.6", label="idle"))
        fig.legend(handles=handles, loc="lower center", ncol=5, frameon=False)
        fig.tight_layout(rect=(0.0, 0.07, 1.0, 1.0))
        fig.savefig(path)
    finally:
        plt.close(fig)
    return Path(path)
