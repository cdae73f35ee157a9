"""How much the updates of one aggregation agree: the mean pairwise cosine of their deltas.

Issue 10, twenty-sixth session: why a buffer of two pays on IID digits-20 and not on the
label-skewed MNIST-1D scenarios. Each aggregation of the ``edge`` preset logs the mean
pairwise cosine similarity of its updates' deltas (each update minus the global model it
started from): 1 when they point the same way, about 0 when they are unrelated (then only
averaging many of them gives a direction).

Runs :mod:`benchmarks.explore_edge` (its arguments after ``--out``) with the edge strategy's
``combine`` wrapped, and writes ``{"version", "updates", "mean_pairwise_cosine"}`` per
aggregation to ``--out`` as JSON.

Example::

    python benchmarks/update_agreement.py --out cos.json -- --scenario digits-20 --seeds 0 \\
        --jsonl rows.jsonl 'ref:{}'
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import strategies.edge as edge_module

LOG: list[dict[str, float]] = []


def mean_pairwise_cosine(deltas: Sequence[np.ndarray]) -> float:
    """Return the mean cosine over the distinct pairs of ``deltas`` (1.0 for one delta).

    >>> round(mean_pairwise_cosine([np.array([1.0, 0.0]), np.array([0.0, 2.0])]), 6)
    0.0
    """
    units = []
    for d in deltas:
        norm = float(np.linalg.norm(d))
        units.append(d / norm if norm > 0 else d)
    n = len(units)
    if n < 2:
        return 1.0
    m = np.stack(units)
    gram = m @ m.T
    return float((gram.sum() - np.trace(gram)) / (n * (n - 1)))


def _wrap() -> None:
    original = edge_module.EdgeStrategy.combine

    def combine(self: Any, global_arrays: Any, updates: Any, version: int, bases: Any) -> Any:
        deltas = []
        for u in updates:
            base = bases.get(u.base_version, global_arrays)
            flat = [
                (np.asarray(a, float) - np.asarray(b, float)).ravel()
                for a, b in zip(u.arrays, base, strict=True)
            ]
            deltas.append(np.concatenate(flat))
        LOG.append(
            {
                "version": version,
                "updates": len(deltas),
                "mean_pairwise_cosine": mean_pairwise_cosine(deltas),
            }
        )
        return original(self, global_arrays, updates, version, bases)

    edge_module.EdgeStrategy.combine = combine  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("explore", nargs=argparse.REMAINDER, help="explore_edge.py's arguments")
    args = p.parse_args(argv)
    rest = [a for a in args.explore if a != "--"]
    _wrap()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import explore_edge  # a script beside this one, not a package

    explore_edge.main(rest)
    args.out.write_text(json.dumps(LOG, indent=0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
