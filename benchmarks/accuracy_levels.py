"""Time to every accuracy level, from recorded runs (no new run): where each strategy wins.

A scenario's target accuracy is one point on the curve. This script reads the recorded
JSONL rows of ``benchmarks/time_to_accuracy.py`` and ``benchmarks/explore_edge.py`` (each
row holds its accuracy curve, ``[[virtual seconds, accuracy], ...]`` after every
aggregation) and prints, for each accuracy level, each strategy's median time over the
seeds the strategies share (a seed that never reached the level counts as never, so a
median is "never" once more than half of them never reached it), how many seeds reached it,
and the ratio of the first strategy's median to the second's.

A strategy is ``NAME=FILE:LABEL[,FILE:LABEL...]``: the rows of ``FILE`` (relative to
``--dir``) whose ``label`` is ``LABEL``; several files add seeds (the first row of a seed
wins). Example (the current preset and FedBuff on mnist1d-100, 15 seeds)::

    E=issue10-s13-transfer-fix-mnist1d-100.jsonl:edge,issue10-s13-heldout-mnist1d-100.jsonl:edge
    F=issue10-s12-rerun-mnist1d-100.jsonl:fedbuff,issue10-s13-heldout-mnist1d-100.jsonl:fedbuff
    python benchmarks/accuracy_levels.py --levels 0.3,0.35,0.4,0.5,0.6,0.65 edge=$E fedbuff=$F
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RAW = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "simulations-raw"


def time_to_level(curve: Sequence[Sequence[float]], level: float) -> float:
    """Return the first time the curve reaches ``level`` (``math.inf`` if it never does)."""
    return next((float(t) for t, acc in curve if acc >= level), math.inf)


def median_time(times: Sequence[float]) -> float:
    """Return the median of ``times``, never (``math.inf``) counting as the longest."""
    if not times:
        raise ValueError("no times to take the median of")
    return float(statistics.median(times))


def parse_strategy(spec: str) -> tuple[str, list[tuple[str, str]]]:
    """Return ``(name, [(file, label), ...])`` of ``NAME=FILE:LABEL[,FILE:LABEL...]``."""
    name, sep, sources = spec.partition("=")
    pairs = [part.rpartition(":") for part in sources.split(",")]
    if not sep or not name or any(not f or not c or not lab for f, c, lab in pairs):
        raise ValueError(f"a strategy is NAME=FILE:LABEL[,FILE:LABEL...], got {spec!r}")
    return name, [(f, lab) for f, _, lab in pairs]


def load_rows(sources: Sequence[tuple[str, str]], folder: Path) -> dict[int, dict[str, Any]]:
    """Return seed -> row of the rows of ``sources`` (the first row of a seed wins)."""
    rows: dict[int, dict[str, Any]] = {}
    for file, label in sources:
        for line in (folder / file).read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("label") == label and row.get("curve"):
                rows.setdefault(int(row["seed"]), row)
    return rows


def level_table(
    runs: Mapping[str, Mapping[int, Mapping[str, Any]]], levels: Sequence[float]
) -> tuple[list[int], list[dict[str, Any]]]:
    """Return the shared seeds and, per level, each strategy's median time and seeds reached.

    Each entry of the list: ``{"level": l, "median": {name: t}, "reached": {name: k},
    "ratio": t_first / t_second or None}`` (``None`` when either median is never, or with
    one strategy).
    """
    seeds = sorted(set.intersection(*(set(rows) for rows in runs.values())))
    if not seeds:
        raise ValueError("the strategies share no seed")
    names = list(runs)
    out = []
    for level in levels:
        times = {n: [time_to_level(runs[n][s]["curve"], level) for s in seeds] for n in names}
        med = {n: median_time(t) for n, t in times.items()}
        ratio = None
        if len(names) > 1 and math.isfinite(med[names[0]]) and math.isfinite(med[names[1]]):
            ratio = med[names[0]] / med[names[1]]
        reached = {n: sum(math.isfinite(x) for x in t) for n, t in times.items()}
        out.append({"level": level, "median": med, "reached": reached, "ratio": ratio})
    return seeds, out


def markdown(names: Sequence[str], seeds: Sequence[int], table: Sequence[dict[str, Any]]) -> str:
    """Return the level table as Markdown (never as "never")."""
    head = " | ".join(f"{n}: median (reached)" for n in names)
    ratio = f"{names[0]} / {names[1]}" if len(names) > 1 else "ratio"
    lines = [
        f"seeds: {len(seeds)} ({', '.join(map(str, seeds))})",
        "",
        f"| level | {head} | {ratio} |",
        "|---|" + "---|" * (len(names) + 1),
    ]
    for row in table:
        cells = " | ".join(
            ("never" if math.isinf(row["median"][n]) else f"{row['median'][n]:.2f} s")
            + f" ({row['reached'][n]}/{len(seeds)})"
            for n in names
        )
        r = "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"
        lines.append(f"| {row['level']:g} | {cells} | {r} |")
    return "\n".join(lines)


def parse_levels(text: str) -> list[float]:
    """Return the accuracy levels of ``"0.3,0.4"`` (each in ``(0, 1]``)."""
    try:
        levels = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"levels are numbers like 0.3,0.4, got {text!r}") from None
    if not all(0.0 < x <= 1.0 for x in levels):
        raise argparse.ArgumentTypeError(f"each level must be in (0, 1], got {text!r}")
    return levels


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("strategies", nargs="+", help="NAME=FILE:LABEL[,FILE:LABEL...]")
    p.add_argument("--levels", type=parse_levels, required=True, help="e.g. 0.3,0.35,0.4")
    p.add_argument("--dir", type=Path, default=RAW, help="folder of the JSONL files")
    args = p.parse_args(argv)
    try:
        specs = [parse_strategy(s) for s in args.strategies]
        runs = {name: load_rows(sources, args.dir) for name, sources in specs}
        seeds, table = level_table(runs, args.levels)
    except (ValueError, OSError) as exc:
        print(f"accuracy_levels: {exc}", file=sys.stderr)
        return 2
    print(markdown(list(runs), seeds, table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
