"""The files that ``flower-edge simulate`` writes to ``--out``: checked before, written after.

``results.json`` (:func:`simulations.report.write_json`), ``accuracy.png``,
``timeline-<strategy>.png`` per strategy, ``radar.png`` and ``summary.txt``. Split out of
:mod:`simulations.cli` to keep it small.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from flower_edge.errors import InputError

if TYPE_CHECKING:
    from simulations.app import SimSettings
    from simulations.report import RunResult

__all__ = [
    "check_output_files",
    "output_files",
    "remove_stale_timelines",
    "unfinished_runs",
    "write_outputs",
]


def output_files(out: Path, strategies: Sequence[str]) -> list[Path]:
    """Return every file that a run of ``strategies`` writes to ``out``, in writing order."""
    timelines = [out / f"timeline-{name}.png" for name in strategies]
    return [out / "results.json", out / "accuracy.png", *timelines, out / "radar.png"] + [
        out / "summary.txt"
    ]


def check_output_files(out: Path, strategies: Sequence[str]) -> None:
    """Raise InputError naming ``--out`` if one of the run's files cannot be a file.

    Found by a new-user probe: a folder named ``results.json`` in ``--out`` ended the command
    after the whole run with a traceback (``IsADirectoryError``), and the results were lost.
    """
    for path in output_files(out, strategies):
        if path.exists() and not path.is_file():
            raise InputError(
                f"--out {out}: {path.name} exists and is not a file (the run writes its "
                f"{path.name} there); remove it or choose another --out"
            )


def unfinished_runs(
    strategies: Sequence[str], done: int, stop: BaseException | None
) -> dict[str, str]:
    """Return each strategy after the first ``done`` that did not finish, and why.

    Found by a new-user probe: ``--strategy all`` lost the rows of the strategies that had
    finished when a later one failed or was interrupted. The strategy that ``stop`` ended
    gets ``"interrupted"`` (Ctrl-C, SIGTERM) or the error's one-line message; those after
    it ``"not started"``. Empty when ``stop`` is ``None`` (the run is complete).
    """
    if stop is None:
        return {}
    if isinstance(stop, KeyboardInterrupt):
        reason = "interrupted"
    else:
        lines = str(stop).strip().splitlines()
        reason = type(stop).__name__ + (f": {lines[0]}" if lines else "")
    return {
        name: reason if i == done else "not started"
        for i, name in enumerate(strategies)
        if i >= done
    }


def write_outputs(
    results: Sequence[RunResult],
    settings: Sequence[SimSettings],
    out: Path,
    as_list: bool,
    unfinished: Mapping[str, str] | None = None,
) -> list[Path]:
    """Write the run's files to ``out`` (see the module docstring); return their paths.

    ``unfinished`` (:func:`unfinished_runs`) marks a partial run in ``results.json`` and
    ``summary.txt``; only the finished strategies have plots.

    Raises
    ------
    OSError
        When a file cannot be written (a full disk, a folder in its place).
    """
    from simulations.plots import plot_accuracy, plot_timeline
    from simulations.report import partial_line, summary_table, write_json

    remove_stale_timelines(out, {r.strategy for r in results})
    written = [write_json(results, out / "results.json", as_list=as_list, unfinished=unfinished)]
    written.append(plot_accuracy(results, out / "accuracy.png"))
    for r in results:
        title = f"{r.scenario} / {r.strategy}: client timeline (seed {r.seed})"
        written.append(
            plot_timeline(
                r.timeline, r.clients, out / f"timeline-{r.strategy}.png", title=title, first_id=1
            )
        )
    written.append(_plot_radar(settings[0], out / "radar.png"))
    table = out / "summary.txt"
    partial = partial_line(unfinished or {})
    text = summary_table(results) + (f"\n{partial}" if partial else "")
    table.write_text(text + "\n", encoding="utf-8")
    written.append(table)
    return written


def remove_stale_timelines(out: Path, strategies: Collection[str]) -> None:
    """Remove the ``timeline-<strategy>.png`` of strategies that this run did not run.

    An ``--out`` folder reused from an earlier run then describes this run only (found by a
    new-user probe: old timelines stayed beside the new results). Only this command's own
    file names are touched; each removal is noted on stderr.
    """
    from simulations.scenarios import STRATEGIES

    for name in STRATEGIES:
        stale = out / f"timeline-{name}.png"
        if name not in strategies and stale.is_file():
            stale.unlink()
            print(
                f"flower-edge simulate: note: removed {stale} of an earlier run ({name} did "
                "not run now)",
                file=sys.stderr,
            )


def _plot_radar(settings: SimSettings, path: Path) -> Path:
    import numpy as np

    from flower_edge.radar import AXES
    from simulations.app import compute_share, devices_for
    from simulations.plots import plot_radar
    from simulations.probe import VirtualProbe

    devices = devices_for(settings.scenario, settings.seed)
    evaluations = np.array(
        [[VirtualProbe(d).profile("quick").evaluations[a] for a in AXES] for d in devices]
    )
    # the node ids of the strategy's log messages (partition id + 1), as in the timelines
    labels = [str(d.spec.node + 1) for d in devices]
    return plot_radar(evaluations, compute_share(settings.scenario), labels, path)
