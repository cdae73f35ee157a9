"""``flower-edge plan``: the sample plan of seed 000 over profiled nodes.

``flower-edge plan --profiles FILE --total-samples F (--model MODEL --input-shape S |
--compute-share P) [--observations FILE] [--method seed|optimal] [--plot radar.png] [--json]``
    Match ratio of each node on the distorted radar (:mod:`flower_edge.radar`), initial
    shares (formula 7) and rebalancing (formulas 8-9, :mod:`flower_edge.allocation`).

Profiles FILE
    ``{"nodes": [{"id": str, "resources": {"cpu": N, "gpu": N, "memory": N, "disk": N},
    "capacity": int}]}`` (``capacity`` optional; a missing resource counts as 0), or a list of
    ``flower-edge profile --json`` outputs each with an added ``"id"`` (and optional
    ``"capacity"``), whose ``resources.<r>.evaluation`` are used. A node entry may also
    hold its profile under ``"profile"``. Any other key of a node entry is bad input.

Observations FILE and time models
    ``{"<id>": [[load, seconds], ...]}``. Each node's time model ``T = k * f + b`` is fitted
    from its observations (Theil-Sen). Without usable observations a node gets the prior
    ``k = k0 / m_d``, ``b = b0`` -- time inversely proportional to its match ratio, which is
    the model under which formula 7 is already balanced. ``k0`` and ``b0`` are the medians of
    ``k * m`` and ``b`` over the nodes with fitted models; with none, ``k0`` is
    ``--seconds-per-sample`` (default 1: times are then relative, in per-sample times of a
    node with ``m = 1``) and ``b0 = 0``. A node with ``m = 0`` and no observations gets no
    samples. A node whose ``m`` is so small next to the best node's that the prior's time of
    its samples is beyond the float range counts at the largest time that stays finite (a
    note says so): it takes samples only where the other nodes are full.

Notes (stderr)
    A node rated more than ``SUSPECT_RATING`` times the other nodes' median on a
    resource (a broken or dishonest profile is likelier than such a device), and a node whose
    observations give no time model (fewer than two distinct loads, a non-positive slope),
    and a node with match ratio 0 (it gets no samples: e.g. rated on cpu alone on the
    four-axis radar, or rated on all four but negligible next to the best node, so that its
    area underflows) or so small that its prior time is beyond the float range, get one line
    each. ``--max-share-fraction Q`` caps every node at
    ``ceil(Q * F)`` samples, as the strategy's ``ShareConfig.max_share_fraction`` does (the
    plan's default 1 is the seed's uncapped formula; the strategy's default is 0.5).

JSON (``--json``)
    ``compute_share``, ``memory_share``; how p_c was obtained: ``compute_share_source``
    (``"model"``, the analysis of ``--model``, or ``"given"``, ``--compute-share``), ``model``,
    ``input_shape`` (list of int), ``model_kwargs`` (object, ``null`` when not given),
    ``share`` (``"count"`` or ``"flops"``) and ``includes_backward`` (bool), all five ``null``
    for a given p_c (:data:`GIVEN_SHARE`); the radar's options ``order_invariant`` and
    ``drop_empty_axes`` (bool); ``method``, ``makespan`` and ``nodes`` (``id``, ``scores``
    per resource, ``match_ratio``, ``samples``, ``predicted_seconds``).

The radar plot (``--plot``) belongs to the upper layer (``simulations.plots.plot_radar``,
matplotlib); this module finds it through the entry-point group :data:`PLOTS_GROUP`, so
``plan`` works without it, and ``--plot`` without it is bad input. It draws the chart of the
plan's options (``--drop-empty-axes``, ``--order-invariant``): its match ratios are the
table's.

Exit codes: 0 success, 2 bad input (unreadable or malformed file, duplicate ids, an unknown key
in a node entry, both or neither of ``--model`` and ``--compute-share``, an option of the
model's analysis such as ``--input-shape`` with ``--compute-share``, unknown model, a factory
that raises, an input shape or dtype that does not fit, F < 0, capacities that cannot hold F,
``--max-rows`` < 0, ``--plot`` where the radar plot or matplotlib is not installed, or a
``--plot`` path that is a folder, in a missing or unwritable folder, or cannot be written).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import json
import math
import sys
from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, cast

from flower_edge import validate
from flower_edge.cli_analyze import add_model_options, analyze_args, parse_input_shape
from flower_edge.errors import InputError
from flower_edge.plan_notes import _RESOURCES, _no_area, _suspect_ratings, _zero_length_axes

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from flower_edge.allocation import Allocation, TimeModel
    from flower_edge.operators import ModelProfile

__all__ = [
    "GIVEN_SHARE",
    "PLOTS_GROUP",
    "RadarPlotter",
    "add_parser",
    "build_plan",
    "read_observations",
    "read_profiles",
    "run",
    "run_plan",
    "share_record",
]

#: entry-point group of the plots that core commands use; ``radar`` draws ``plan --plot``
PLOTS_GROUP = "flower_edge.plots"


class RadarPlotter(Protocol):
    """``simulations.plots.plot_radar``: the radar chart of ``plan --plot``."""

    def __call__(
        self,
        evaluations: Any,
        compute_share: float,
        labels: Sequence[str],
        path: str,
        *,
        order_invariant: bool = ...,
        drop_empty_axes: bool = ...,
    ) -> Path:
        """Draw the nodes on the radar chart of the plan's options; return ``path``."""
        ...


# ---------------------------------------------------------------- parsers
def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``plan`` sub-command (the model options of ``analyze`` included)."""
    plan = subparsers.add_parser(
        "plan",
        help="split training samples over nodes by radar match ratio, then rebalance",
        description=(
            "Match each node's resources to the model on the distorted radar chart, split "
            "F samples by match ratio and rebalance so that the nodes finish together "
            "(seed 000, formulas 6-9)."
        ),
    )
    plan.add_argument(
        "--profiles",
        metavar="FILE",
        required=True,
        help='node profiles (JSON): {"nodes": [{"id": ..., "resources": {"cpu": N, "gpu": N, '
        '"memory": N, "disk": N}, "capacity": samples (optional)}]}, or a list of '
        '`flower-edge profile --json` reports each with an added "id"',
    )
    plan.add_argument(
        "--total-samples", metavar="F", required=True, help="samples to split (integer >= 0)"
    )
    plan.add_argument("--model", metavar="MODEL", help="pkg.mod:factory or a bundled model name")
    plan.add_argument(
        "--compute-share",
        metavar="P",
        help="the model's compute-intensive operator share p_c in [0, 1] (instead of --model)",
    )
    add_model_options(plan, required=False)
    plan.add_argument(
        "--observations", metavar="FILE", help='observed times (JSON {"id": [[load, s], ...]})'
    )
    plan.add_argument(
        "--method",
        choices=("seed", "optimal"),
        default="seed",
        help="seed: slowest-to-fastest transfers (formula 9); optimal: equal finish "
        "(default: seed)",
    )
    plan.add_argument(
        "--order-invariant",
        action="store_true",
        help="average the radar areas over every axis order instead of the seed's C, G, M, D",
    )
    plan.add_argument(
        "--drop-empty-axes",
        action="store_true",
        help="leave a resource axis on which no node scores out of the radar chart (the seed "
        "keeps all four: C, G, M, D)",
    )
    plan.add_argument(
        "--seconds-per-sample",
        metavar="K0",
        default=None,
        help="prior per-sample time of a node with match ratio 1, when no node has "
        "observations (default: 1, relative times)",
    )
    plan.add_argument(
        "--max-share-fraction",
        metavar="Q",
        default="1.0",
        help="cap on any node's samples as a fraction of F, in (0, 1], against absurd "
        "profile claims (the strategy's ShareConfig.max_share_fraction; default: 1, "
        "uncapped as in the seed)",
    )
    plan.add_argument("--plot", metavar="PNG", help="write the radar chart of all nodes here")
    plan.add_argument("--json", action="store_true", help="print only the JSON plan")
    plan.add_argument(
        "--max-rows",
        metavar="N",
        type=int,
        default=50,
        help="nodes listed in the table (default: 50; --json lists every node)",
    )
    plan.set_defaults(run=run)
    return plan  # type: ignore[no-any-return]


def run(args: argparse.Namespace) -> int:
    """Run ``flower-edge plan``; return the exit code."""
    return run_plan(args)


# ---------------------------------------------------------------- plan inputs
def _read_json(path_text: str, option: str) -> Any:
    path = Path(path_text).expanduser()  # `--profiles=~/nodes.json`: the shell leaves ~ alone
    try:  # -sig: a byte-order mark (Windows editors write one) is not JSON's business
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise InputError(f"{option} {path_text!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{option} {path_text!r} is not UTF-8 text (byte {exc.start}: {exc.reason}); "
            "expected a JSON file"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{option} {path_text!r} is not valid JSON: {exc}") from None


def _number(value: Any, where: str) -> float:
    return validate.number(where, value, low=0.0, error=InputError)


def _resources(entry: Mapping[str, Any], where: str) -> list[float]:
    resources = entry.get("resources")
    if resources is None and isinstance(entry.get("profile"), Mapping):
        resources = entry["profile"].get("resources")
        where = f"{where}.profile"
    if not isinstance(resources, Mapping):
        raise InputError(f"{where}.resources must be an object with keys {_RESOURCES}")
    unknown = set(resources) - set(_RESOURCES)
    if unknown:
        raise InputError(
            f"{where}.resources has unknown keys {sorted(unknown)}; allowed: {_RESOURCES}"
        )
    out = []
    for r in _RESOURCES:
        value = resources.get(r, 0.0)
        if isinstance(value, Mapping):  # a ``profile --json`` resource report
            value = value.get("evaluation")
            out.append(_number(value, f"{where}.resources.{r}.evaluation"))
        else:
            out.append(_number(value, f"{where}.resources.{r}"))
    return out


#: the keys of a node entry: its own, and those of a ``profile --json`` report
_NODE_KEYS = ("id", "resources", "capacity", "profile", "host", "mode", "elapsed_seconds")


def _check_node_keys(entry: Mapping[str, Any], where: str) -> None:
    """Reject a node entry's unknown keys (a misspelt ``capacity`` would drop the node's cap).

    Found by a new-user probe: ``{"id": "a", "capcity": 500, ...}`` planned the node with no
    capacity at all, without a word.
    """
    unknown = sorted(map(str, set(entry) - set(_NODE_KEYS)))
    if unknown:
        close = [m for k in unknown for m in difflib.get_close_matches(k, _NODE_KEYS, n=1)]
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise InputError(
            f"{where} has unknown keys {unknown}{hint}; allowed: {_NODE_KEYS} (the last three "
            "are those of a `flower-edge profile --json` report)"
        )


def read_profiles(data: Any) -> tuple[list[str], list[list[float]], list[int | None]]:
    """Parse a profiles document into node ids, evaluations (n, 4) and capacities.

    Raises
    ------
    InputError
        Not a ``{"nodes": [...]}`` object or a list, an empty node list, a missing or
        duplicate id, or a bad resource value or capacity; the message names the entry.
    """
    if isinstance(data, Mapping) and "nodes" not in data and "resources" in data:
        # one `profile --json` report (or a --cache file) given as is: say how to list it
        raise InputError(
            "profiles is a single `flower-edge profile --json` report; plan needs a list of "
            'them, each with an "id": [{"id": "node-1", "resources": ..., ...}, ...]'
        )
    if isinstance(data, Mapping) and set(data) - {"nodes"}:
        raise InputError(
            f"profiles has unknown top-level keys {sorted(map(str, set(data) - {'nodes'}))}; "
            'the document is {"nodes": [...]}'
        )
    nodes = data.get("nodes") if isinstance(data, Mapping) else data
    if not isinstance(nodes, list):
        raise InputError('profiles must be {"nodes": [...]} or a list of profiles with ids')
    if not nodes:
        raise InputError("profiles: the node list is empty; need at least 1 node")
    ids: list[str] = []
    evaluations: list[list[float]] = []
    capacities: list[int | None] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(nodes):
        where = f"nodes[{i}]"
        if not isinstance(entry, Mapping):
            raise InputError(f"{where} must be an object, got {type(entry).__name__}")
        _check_node_keys(entry, where)
        node_id = entry.get("id")
        if not isinstance(node_id, str | int) or isinstance(node_id, bool) or node_id == "":
            raise InputError(
                f"{where}.id must be a non-empty string (or an integer), got {node_id!r}"
            )
        node_id = str(node_id)
        if node_id in seen:
            raise InputError(f"{where}.id {node_id!r} duplicates nodes[{seen[node_id]}].id")
        seen[node_id] = i
        capacity = validate.integer(
            f"{where}.capacity",
            entry.get("capacity"),
            low=0,
            allow_none=True,
            integral_float=True,  # 400.0: pandas and JavaScript write whole numbers so
            error=InputError,
        )
        ids.append(node_id)
        evaluations.append(_resources(entry, where))
        capacities.append(capacity)
    return ids, evaluations, capacities


def read_observations(data: Any, ids: Sequence[str]) -> dict[str, list[tuple[float, float]]]:
    """Parse ``{"<id>": [[load, seconds], ...]}``; every id must be a known node."""
    if not isinstance(data, Mapping):
        raise InputError('observations must be an object {"<id>": [[load, seconds], ...]}')
    known = set(ids)
    out: dict[str, list[tuple[float, float]]] = {}
    for node_id, pairs in data.items():
        if node_id not in known:
            raise InputError(f"observations: unknown node id {node_id!r} (not in --profiles)")
        if not isinstance(pairs, list):
            raise InputError(f"observations[{node_id!r}] must be a list of [load, seconds]")
        parsed = []
        for j, pair in enumerate(pairs):
            where = f"observations[{node_id!r}][{j}]"
            if not isinstance(pair, list | tuple) or len(pair) != 2:
                raise InputError(f"{where} must be a [load, seconds] pair, got {pair!r}")
            parsed.append((_number(pair[0], f"{where} load"), _number(pair[1], f"{where} seconds")))
        out[node_id] = parsed
    return out


# ---------------------------------------------------------------- the plan
def _time_models(
    ids: Sequence[str],
    ratios: NDArray[np.float64],
    observations: Mapping[str, Sequence[tuple[float, float]]],
    k0: float | None,
    notes: list[str] | None = None,
    limits: Sequence[int] | None = None,
) -> tuple[list[TimeModel], list[bool]]:
    """Fit each node's time model, or give it the match-ratio prior (module docstring).

    ``limits`` (default: 0 each) is the most samples each node can be given (its capacity,
    at most ``F``). A node whose prior time per sample ``K0 / m`` is beyond what a float can
    hold for that many samples (a match ratio so small next to the best node's that
    ``K0 / m`` overflows: an absurd profile on one side or the other) counts at the largest
    time that stays finite, :data:`_MAX_PRIOR_SECONDS` over ``limit + 1``, with a note: it
    takes samples only where the other nodes are full, as
    :func:`~flower_edge.allocation.initial_shares` lets a tiny ratio do. ``TimeModel``
    refused it with ``TimeModel.k must be a finite number > 0, got inf``, naming no node,
    and a ``K0 / m`` just below the float range failed in ``rebalance`` as ``models[i]``
    (found by a new-user probe).

    Raises
    ------
    InputError
        Naming ``--seconds-per-sample``: ``K0`` (no node observed) so large that even a node
        of match ratio 1 overflows a float on the ``F`` samples.
    """
    from flower_edge.allocation import TimeModel, fit_time_model

    fitted: dict[int, TimeModel] = {}
    for d, node_id in enumerate(ids):
        obs = observations.get(node_id)
        if obs is None:  # an empty list given for a node gets its note below, as one point does
            continue
        try:
            fitted[d] = fit_time_model(obs)
        except InputError as exc:  # too few points or a non-positive slope: the prior below
            if notes is not None:
                notes.append(
                    f"node {node_id}: its observations give no time model ({exc}): it gets "
                    "the match-ratio prior"
                )
    usable = [d for d in fitted if ratios[d] > 0]
    k0, b0 = _prior(fitted, ratios, usable, k0, notes)
    most = [0] * len(ids) if limits is None else list(limits)
    if not usable and k0 > _MAX_PRIOR_SECONDS / (max(most, default=0) + 1):
        raise InputError(
            f"--seconds-per-sample {k0:g}: the prior time of {max(most)} samples on a node of "
            f"match ratio 1 is beyond the float range (over {_MAX_PRIOR_SECONDS:.3g} s); give "
            "K0 in larger time units"
        )
    models: list[TimeModel] = []
    active: list[bool] = []
    for d in range(len(ids)):
        if d in fitted:
            models.append(fitted[d])
            active.append(True)
        elif ratios[d] > 0:
            k = k0 / float(ratios[d])
            ceiling = _MAX_PRIOR_SECONDS / (most[d] + 1)
            if not k <= ceiling:  # inf included
                k = ceiling
                if notes is not None:
                    notes.append(
                        f"node {ids[d]}: match ratio {float(ratios[d]):.3g}, so small next to "
                        f"the best node's that its prior time of {most[d]} samples (K0 / m per "
                        f"sample) is beyond the float range: it counts as {k:.3g} s per sample "
                        "and takes samples only where the other nodes are full; check its "
                        "profile and the best node's"
                    )
            models.append(TimeModel(k, b0))
            active.append(True)
        else:  # no match and nothing observed: no samples
            models.append(TimeModel(k0, b0))
            active.append(False)
    return models, active


def _prior(
    fitted: Mapping[int, TimeModel],
    ratios: NDArray[np.float64],
    usable: Sequence[int],
    given: float | None,
    notes: list[str] | None,
) -> tuple[float, float]:
    """Return the prior's ``(K0, b0)``: the observed nodes' medians, else ``(given or 1, 0)``.

    A ``--seconds-per-sample`` given while observations set the prior gets a note (it was
    ignored without a word: found by a new-user probe).
    """
    import numpy as np

    if not usable:
        return (1.0 if given is None else given), 0.0
    k0 = float(np.median([fitted[d].k * ratios[d] for d in usable]))
    if given is not None and notes is not None:
        notes.append(
            f"--seconds-per-sample {given:g} is not used: the prior of the nodes without "
            f"observations comes from the observed nodes (K0 = {k0:.3g})"
        )
    return k0, float(np.median([fitted[d].b for d in usable]))


#: the largest predicted time of a prior's node, seconds: a quarter of the float range, so
#: that ``k * (f + 1) + b`` of the rebalancing stays finite
_MAX_PRIOR_SECONDS = sys.float_info.max / 4


def _check_fitted_times(
    ids: Sequence[str],
    models: Sequence[TimeModel],
    limits: Sequence[int],
    observations: Mapping[str, Sequence[tuple[float, float]]],
) -> None:
    """Raise InputError naming the node whose observed time of its largest share overflows.

    :func:`~flower_edge.allocation.rebalance` refuses such a model as ``models[i]``, an
    index the user never gave (found by a new-user probe); this names the node's id.
    """
    for d, (model, most) in enumerate(zip(models, limits, strict=True)):
        if ids[d] in observations and not math.isfinite(model.predict(most)):
            raise InputError(
                f"observations[{ids[d]!r}]: the predicted time k * f + b of {most} samples "
                f"overflows a float (k = {model.k:.3g} s per sample, b = {model.b:.3g} s, "
                "fitted from its observations); give the seconds in larger time units"
            )


def build_plan(
    ids: Sequence[str],
    evaluations: Sequence[Sequence[float]],
    capacities: Sequence[int | None],
    total: int,
    compute_share: float,
    *,
    observations: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    method: str = "seed",
    order_invariant: bool = False,
    seconds_per_sample: float | None = None,
    drop_empty_axes: bool = False,
    max_share_fraction: float = 1.0,
    notes: list[str] | None = None,
    compute_share_record: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], Allocation]:
    """Compute the plan: scores, match ratios, initial shares and the rebalanced allocation.

    ``compute_share_record`` (default: :data:`GIVEN_SHARE`, p_c given as a number) is how
    ``compute_share`` was obtained, :func:`share_record`; it goes into the document beside
    the radar's options ``order_invariant`` and ``drop_empty_axes``.

    ``max_share_fraction`` caps every node at ``ceil(q * total)`` samples (with its own
    capacity). ``seconds_per_sample`` is K0 (``None``: 1), used only where no node's
    observations give a time model (a note says when a given K0 goes unused). ``notes``
    (when given) receives one line per thing the plan worked around: a
    node's rating far above the others' (``SUSPECT_RATING``), observations that give
    no time model, a node with match ratio 0.

    Returns
    -------
    tuple of (dict, Allocation)
        The ``plan --json`` document and the allocation behind it.
    """
    import numpy as np

    from flower_edge.allocation import MAX_SAMPLES, initial_shares, rebalance
    from flower_edge.radar import match_ratios, standardise

    validate.integer("--total-samples", total, low=0, high=MAX_SAMPLES, error=InputError)
    validate.number(
        "--seconds-per-sample",
        seconds_per_sample,
        low=0.0,
        low_inclusive=False,
        allow_none=True,
        error=InputError,
    )
    q = validate.number(
        "--max-share-fraction",
        max_share_fraction,
        low=0.0,
        low_inclusive=False,
        high=1.0,
        error=InputError,
    )
    ev = np.asarray(evaluations, dtype=np.float64)
    if notes is not None:
        notes.extend(_suspect_ratings(ids, ev))
    if q < 1.0:
        most = math.ceil(q * total)
        capacities = [most if c is None else min(c, most) for c in capacities]
    scores = standardise(ev)
    ratios = match_ratios(
        ev, compute_share, order_invariant=order_invariant, drop_empty_axes=drop_empty_axes
    )
    if total > 0 and not np.any(np.asarray(ratios) > 0):
        hint = "" if drop_empty_axes else "; pass --drop-empty-axes to rate them on the others"
        raise InputError(
            "every node's match ratio is 0, so none can take samples: on the four-axis "
            "radar a node rated on no two neighbouring axes (cpu-gpu, gpu-memory, "
            "memory-disk, disk-cpu; e.g. cpu alone, or cpu and memory) has no area"
            f"{_zero_length_axes(compute_share)}{hint}, or rate every node's cpu, gpu, "
            "memory and disk"
        )
    limits = [total if c is None else min(c, total) for c in capacities]
    models, active = _time_models(
        ids, ratios, observations or {}, seconds_per_sample, notes, limits
    )
    if notes is not None and total > 0 and not np.all(ratios > 0):
        rated = (ev > 0).astype(np.float64)  # the radar of the rated axes alone
        shaped, helped = (
            match_ratios(rated, compute_share, order_invariant=order_invariant, drop_empty_axes=d)
            > 0
            for d in (drop_empty_axes, True)
        )
        notes.extend(  # a node of ratio 0 is active only with a fitted time model
            _no_area(ids, ev, ratios, shaped, drop_empty_axes, compute_share, helped, active)
        )
    _check_fitted_times(ids, models, limits, observations or {})
    caps: list[int | None] = [c if a else 0 for c, a in zip(capacities, active, strict=True)]
    try:
        shares = initial_shares(total, ratios, capacities)
    except InputError as exc:
        capped = f" (--max-share-fraction {q:g}: at most {math.ceil(q * total)} each)"
        raise InputError(f"--total-samples {total}: {exc}{capped if q < 1 else ''}") from None
    alloc = rebalance(shares, models, method=method, capacities=caps)  # type: ignore[arg-type]
    nodes = [
        {
            "id": node_id,
            "scores": dict(zip(_RESOURCES, map(float, scores[d]), strict=True)),
            "match_ratio": float(ratios[d]),
            "samples": alloc.samples[d],
            "predicted_seconds": alloc.predicted_seconds[d],
        }
        for d, node_id in enumerate(ids)
    ]
    doc = {
        "compute_share": float(compute_share),
        "memory_share": 1.0 - float(compute_share),
        **(GIVEN_SHARE if compute_share_record is None else compute_share_record),
        "order_invariant": bool(order_invariant),
        "drop_empty_axes": bool(drop_empty_axes),
        "method": alloc.method,
        "makespan": alloc.makespan,
        "nodes": nodes,
    }
    return doc, alloc


#: the ``plan --json`` record of a p_c given with ``--compute-share``: no model, no analysis
GIVEN_SHARE: Mapping[str, Any] = MappingProxyType(
    {
        "compute_share_source": "given",
        "model": None,
        "input_shape": None,
        "model_kwargs": None,
        "share": None,
        "includes_backward": None,
    }
)


def share_record(args: argparse.Namespace, profile: ModelProfile) -> dict[str, Any]:
    """Return the ``plan --json`` record of a p_c from ``--model``'s analysis ``profile``.

    The model's spec, its example batch shape and factory keyword arguments (``null`` when
    none were given), and, as ``analyze --json`` writes them, how p_c was counted
    (``share``: ``"count"`` or ``"flops"``) and whether the step included the backward pass.
    Found by a CLI probe: ``plan --json`` with ``--share flops --forward-only`` wrote the
    same fields as with the defaults, so a saved plan's p_c could not be told apart.
    """
    return {
        "compute_share_source": "model",
        "model": args.model,
        "input_shape": list(parse_input_shape(args.input_shape)),
        "model_kwargs": None if args.model_kwargs is None else json.loads(args.model_kwargs),
        "share": profile.share,
        "includes_backward": profile.includes_backward,
    }


def _compute_share(args: argparse.Namespace) -> tuple[float, Mapping[str, Any]]:
    """Return p_c and how it was obtained (:data:`GIVEN_SHARE` or :func:`share_record`)."""
    if (args.model is None) == (args.compute_share is None):
        raise InputError("give exactly one of --model (with --input-shape) or --compute-share")
    if args.model is not None:
        profile = analyze_args(args, args.model)
        return profile.compute_share, share_record(args, profile)
    # the options of the model's analysis mean nothing without a model (found by a new-user
    # probe: `--compute-share 0.5 --input-shape 3,4` planned silently, the shape unused)
    model_only = [
        option
        for option, given in (
            ("--input-shape", args.input_shape is not None),
            ("--input-dtype", args.input_dtype != "float32"),
            ("--model-kwargs", args.model_kwargs is not None),
            ("--share", args.share != "count"),
            ("--forward-only", args.forward_only),
            ("--execute", args.execute),
        )
        if given
    ]
    if model_only:
        raise InputError(
            f"{', '.join(model_only)} describe{'s' if len(model_only) == 1 else ''} the "
            "analysis of --model; with --compute-share there is no model to analyse: leave "
            f"{'it' if len(model_only) == 1 else 'them'} out, or give --model instead"
        )
    share = validate.from_text(args.compute_share, float)
    return validate.probability("--compute-share", share, error=InputError), GIVEN_SHARE


def _int_option(text: str, option: str) -> int:
    return validate.integer(option, validate.from_text(text, int), low=0, error=InputError)


def _check_plot_path(text: str) -> Path:
    """Check ``--plot`` before any computing: not a folder, in an existing writable folder.

    Creating (and removing) a trial file in the folder is the real test of writability:
    permission bits say little to root or on ACLs (``/sys`` refuses new files even to root).

    Raises
    ------
    InputError
        Naming ``--plot``: an empty path, an existing folder, a missing parent folder, or a
        parent folder that does not take a new file.
    """
    import os
    import tempfile

    if not text.strip():
        raise InputError("--plot must be a file name (PNG), got ''")
    path = Path(text).expanduser()
    if path.is_dir():
        raise InputError(f"--plot {text!r} is a folder; give a file name, e.g. {text}/radar.png")
    if path.suffix.lower() != ".png":
        raise InputError(f"--plot {text!r}: the radar chart is a PNG; give a name ending in .png")
    folder = path.parent
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise InputError(f"--plot {text!r}: {str(folder)!r} {what}")
    try:
        fd, trial = tempfile.mkstemp(prefix=".flower-edge-plot-", suffix=".png", dir=folder)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(
            f"--plot {text!r}: folder {str(folder)!r} is not writable: {reason}"
        ) from None
    os.close(fd)
    os.unlink(trial)
    return path


def format_plan(doc: Mapping[str, Any], other: Allocation, max_rows: int) -> str:
    """Return the readable plan table."""
    nodes = doc["nodes"]
    total = sum(n["samples"] for n in nodes)
    if doc.get("compute_share_source") == "model":
        passes = "forward and backward" if doc["includes_backward"] else "forward only"
        source = f" (--model {doc['model']}: by {doc['share']}, {passes})"
    else:
        source = " (given)" if doc.get("compute_share_source") == "given" else ""
    axes = [
        text
        for text, on in (
            ("order-invariant", doc.get("order_invariant")),
            ("empty axes dropped", doc.get("drop_empty_axes")),
        )
        if on
    ]
    radar = f"; radar {', '.join(axes)}" if axes else ""
    lines = [
        f"{len(nodes)} nodes, {total} samples; p_c = {doc['compute_share']:.4f}{source}, "
        f"p_m = {doc['memory_share']:.4f}{radar}",
        f"method {doc['method']}: makespan {doc['makespan']:.6g} s "
        f"({other.method}: {other.makespan:.6g} s)",
        "",
        f"{'id':<20} {'cpu':>5} {'gpu':>5} {'mem':>5} {'disk':>5} {'match':>7} "
        f"{'samples':>8} {'seconds':>10}",
    ]
    for n in nodes[:max_rows]:
        s = n["scores"]
        lines.append(
            f"{n['id'][:20]:<20} {s['cpu']:>5.2f} {s['gpu']:>5.2f} {s['memory']:>5.2f} "
            f"{s['disk']:>5.2f} {n['match_ratio']:>7.4f} {n['samples']:>8d} "
            f"{n['predicted_seconds']:>10.4g}"
        )
    if len(nodes) > max_rows:
        lines.append(f"... {len(nodes) - max_rows} more nodes (--max-rows, or --json for all)")
    return "\n".join(lines)


def _importable(module: str) -> bool:
    """Whether ``module`` can be found, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or blocked in sys.modules
        return False


def radar_plotter() -> RadarPlotter:
    """Return the installed radar plot (entry point ``radar`` of :data:`PLOTS_GROUP`).

    Raises
    ------
    InputError
        Naming ``--plot``: no radar plot installed, or it (or matplotlib) cannot be imported.
    """
    found = list(entry_points(group=PLOTS_GROUP, name="radar"))
    if not found:
        raise InputError(
            f"--plot needs the radar plot of the simulations package (entry point 'radar' of "
            f"{PLOTS_GROUP!r}), which is not installed here; run plan without --plot"
        )
    if not _importable("matplotlib"):
        raise InputError("--plot needs matplotlib, which is not installed here")
    try:
        return cast(RadarPlotter, found[0].load())
    except ImportError as exc:
        raise InputError(
            f"--plot: cannot import the radar plot {found[0].value!r} ({exc}); "
            "run plan without --plot"
        ) from None


def run_plan(args: argparse.Namespace) -> int:
    """Run ``flower-edge plan``; return the exit code."""
    total = _int_option(args.total_samples, "--total-samples")
    max_rows = validate.integer("--max-rows", args.max_rows, low=0, error=InputError)
    # checked here, on the text as given (`abc` was reported as `got nan`; new-user probe)
    k0 = validate.number(
        "--seconds-per-sample",
        None
        if args.seconds_per_sample is None
        else validate.from_text(args.seconds_per_sample, float),
        low=0.0,
        low_inclusive=False,
        allow_none=True,
        error=InputError,
    )
    fraction = validate.number(
        "--max-share-fraction",
        validate.from_text(args.max_share_fraction, float),
        low=0.0,
        low_inclusive=False,
        high=1.0,
        error=InputError,
    )
    ids, evaluations, capacities = read_profiles(_read_json(args.profiles, "--profiles"))
    observations = (
        read_observations(_read_json(args.observations, "--observations"), ids)
        if args.observations is not None
        else {}
    )
    plot = radar_plotter() if args.plot is not None else None
    plot_path = _check_plot_path(args.plot) if args.plot is not None else None
    share, record = _compute_share(args)
    notes: list[str] = []
    doc, alloc = build_plan(
        ids,
        evaluations,
        capacities,
        total,
        share,
        observations=observations,
        method=args.method,
        order_invariant=args.order_invariant,
        seconds_per_sample=k0,
        drop_empty_axes=args.drop_empty_axes,
        max_share_fraction=fraction,
        notes=notes,
        compute_share_record=record,
    )
    for note in notes:  # stderr: stdout may hold the JSON plan
        sys.stderr.write(f"flower-edge plan: note: {note}\n")
    if plot is not None and plot_path is not None:
        try:
            plot(
                evaluations,
                share,
                ids,
                str(plot_path),
                order_invariant=args.order_invariant,
                drop_empty_axes=args.drop_empty_axes,
            )
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise InputError(
                f"--plot {args.plot!r}: cannot write the radar chart: {reason}"
            ) from None
    if args.json:
        sys.stdout.write(json.dumps(doc) + "\n")
        return 0
    other_method = "optimal" if args.method == "seed" else "seed"
    _, other = build_plan(
        ids,
        evaluations,
        capacities,
        total,
        share,
        observations=observations,
        method=other_method,
        order_invariant=args.order_invariant,
        seconds_per_sample=k0,
        drop_empty_axes=args.drop_empty_axes,
        max_share_fraction=fraction,
    )
    sys.stdout.write(format_plan(doc, other, max_rows) + "\n")
    if not observations:
        sys.stdout.write(
            "(no observations: times from the match-ratio prior, k = K0 / m with K0 = "
            f"{1.0 if k0 is None else k0:g})\n"
        )
    if plot_path is not None:
        sys.stdout.write(f"radar chart: {args.plot}\n")
    return 0
