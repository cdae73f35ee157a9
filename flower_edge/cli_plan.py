"""``flower-edge analyze`` and ``flower-edge plan``: the model's needs, and the sample plan.

``flower-edge analyze MODEL --input-shape 32,1,28,28 [--json]``
    Operator intensity of one training step of MODEL (:mod:`flower_edge.operators`). MODEL is
    ``pkg.mod:factory`` (a callable that takes no argument and returns a ``torch.nn.Module``)
    or a bundled model's name (:data:`flower_edge.models.MODELS`); a bundled model is sized to
    the input shape (input features, channels, image size) unless ``--model-kwargs`` says
    otherwise. ``--json`` prints only ``ModelProfile.to_dict()``.

``flower-edge plan --profiles FILE --total-samples F (--model MODEL --input-shape S |
--compute-share P) [--observations FILE] [--method seed|optimal] [--plot radar.png] [--json]``
    Match ratio of each node on the distorted radar (:mod:`flower_edge.radar`), initial
    shares (formula 7) and rebalancing (formulas 8-9, :mod:`flower_edge.allocation`).

Profiles FILE
    ``{"nodes": [{"id": str, "resources": {"cpu": N, "gpu": N, "memory": N, "disk": N},
    "capacity": int}]}`` (``capacity`` optional; a missing resource counts as 0), or a list of
    ``flower-edge profile --json`` outputs each with an added ``"id"`` (and optional
    ``"capacity"``), whose ``resources.<r>.evaluation`` are used. A node entry may also
    hold its profile under ``"profile"``.

Observations FILE and time models
    ``{"<id>": [[load, seconds], ...]}``. Each node's time model ``T = k * f + b`` is fitted
    from its observations (Theil-Sen). Without usable observations a node gets the prior
    ``k = k0 / m_d``, ``b = b0`` -- time inversely proportional to its match ratio, which is
    the model under which formula 7 is already balanced. ``k0`` and ``b0`` are the medians of
    ``k * m`` and ``b`` over the nodes with fitted models; with none, ``k0`` is
    ``--seconds-per-sample`` (default 1: times are then relative, in per-sample times of a
    node with ``m = 1``) and ``b0 = 0``. A node with ``m = 0`` and no observations gets no
    samples.

The radar plot (``--plot``) belongs to the upper layer (``simulations.plots.plot_radar``,
matplotlib); this module finds it through the entry-point group :data:`PLOTS_GROUP`, so
``plan`` works without it, and ``--plot`` without it is bad input.

Exit codes: 0 success, 2 bad input (unreadable or malformed file, duplicate ids, unknown
model, a factory that raises, an input shape that does not fit, F < 0, capacities that cannot
hold F, ``--plot`` where the radar plot or matplotlib is not installed).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from flower_edge import validate
from flower_edge.errors import InputError

if TYPE_CHECKING:
    import numpy as np
    import torch
    from numpy.typing import NDArray
    from torch import nn

    from flower_edge.allocation import Allocation, TimeModel
    from flower_edge.operators import ModelProfile

__all__ = [
    "PLOTS_GROUP",
    "RadarPlotter",
    "add_parser",
    "build_plan",
    "load_model",
    "parse_input_shape",
    "read_observations",
    "read_profiles",
    "run",
    "run_analyze",
    "run_plan",
]

#: entry-point group of the plots that core commands use; ``radar`` draws ``plan --plot``
PLOTS_GROUP = "flower_edge.plots"
#: ``plot(evaluations, compute_share, labels, path) -> path`` (``simulations.plots.plot_radar``)
RadarPlotter = Callable[[Any, float, Sequence[str], str], Path]

_RESOURCES = ("cpu", "gpu", "memory", "disk")


# ---------------------------------------------------------------- parsers
def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``analyze`` and ``plan`` sub-commands; return the ``plan`` parser."""
    analyze = subparsers.add_parser(
        "analyze",
        help="operator intensity of a model's training step (FLOPs, bytes, compute share)",
        description=(
            "Capture every aten operator of one training step of MODEL, price its FLOPs and "
            "bytes, and split the operators into compute- and memory-intensive ones around the "
            "mean intensity (seed 000, claims 1-2)."
        ),
    )
    analyze.add_argument("model", metavar="MODEL", help="pkg.mod:factory or a bundled model name")
    _add_model_options(analyze, required=True)
    analyze.add_argument("--json", action="store_true", help="print only the JSON profile")
    analyze.add_argument(
        "--operators", action="store_true", help="list every operator, not a summary per op"
    )
    analyze.set_defaults(run=run)

    plan = subparsers.add_parser(
        "plan",
        help="split training samples over nodes by radar match ratio, then rebalance",
        description=(
            "Match each node's resources to the model on the distorted radar chart, split "
            "F samples by match ratio and rebalance so that the nodes finish together "
            "(seed 000, formulas 6-9)."
        ),
    )
    plan.add_argument("--profiles", metavar="FILE", required=True, help="node profiles (JSON)")
    plan.add_argument(
        "--total-samples", metavar="F", required=True, help="samples to split (integer >= 0)"
    )
    plan.add_argument("--model", metavar="MODEL", help="pkg.mod:factory or a bundled model name")
    plan.add_argument(
        "--compute-share",
        metavar="P",
        help="the model's compute-intensive operator share p_c in [0, 1] (instead of --model)",
    )
    _add_model_options(plan, required=False)
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
        "--seconds-per-sample",
        metavar="K0",
        default="1.0",
        help="prior per-sample time of a node with match ratio 1, when no node has "
        "observations (default: 1, relative times)",
    )
    plan.add_argument("--plot", metavar="PNG", help="write the radar chart of all nodes here")
    plan.add_argument("--json", action="store_true", help="print only the JSON plan")
    plan.add_argument(
        "--max-rows", metavar="N", type=int, default=50, help="nodes listed in the table"
    )
    plan.set_defaults(run=run)
    return plan  # type: ignore[no-any-return]


def _add_model_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--input-shape",
        metavar="S",
        required=required,
        help="example batch shape, comma-separated, e.g. 32,1,28,28",
    )
    parser.add_argument(
        "--input-dtype",
        choices=("float32", "float64", "int64"),
        default="float32",
        help="dtype of the example batch (default: float32)",
    )
    parser.add_argument(
        "--model-kwargs",
        metavar="JSON",
        default=None,
        help="keyword arguments for the model factory, e.g. '{\"width\": 32}'",
    )
    parser.add_argument(
        "--share",
        choices=("count", "flops"),
        default="count",
        help="compute share by operator count (the seed) or by FLOPs (default: count)",
    )
    parser.add_argument("--forward-only", action="store_true", help="analyse the forward pass only")
    parser.add_argument(
        "--execute",
        action="store_true",
        help="run the step for real on the CPU (default: shapes only, on the meta device)",
    )


def run(args: argparse.Namespace) -> int:
    """Dispatch to :func:`run_analyze` or :func:`run_plan` by ``args.command``."""
    return run_plan(args) if args.command == "plan" else run_analyze(args)


# ---------------------------------------------------------------- model loading
def parse_input_shape(text: str) -> tuple[int, ...]:
    """Parse ``"32,1,28,28"`` into a shape of positive integers."""
    try:
        shape = tuple(int(v) for v in text.replace("x", ",").split(",") if v.strip())
    except ValueError:
        shape = ()
    if not shape or any(v <= 0 for v in shape):
        raise InputError(
            f"--input-shape must be comma-separated integers >= 1 (e.g. 32,1,28,28), got {text!r}"
        )
    return shape


def _model_kwargs(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"--model-kwargs must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise InputError(f"--model-kwargs must be a JSON object, got {type(value).__name__}")
    return value


def _bundled_kwargs(name: str, shape: tuple[int, ...]) -> dict[str, Any]:
    """Size a bundled model to the input shape (overridden by ``--model-kwargs``)."""
    features = math.prod(shape[1:]) if len(shape) > 1 else 1
    if name in ("mlp", "cnn1d"):
        return {"in_features": features}
    if name == "transformer":
        return {"seq_len": features}
    if name == "cnn" and len(shape) == 4:
        return {"in_channels": shape[1], "image_size": shape[2]}
    if name == "resnet18" and len(shape) == 4:
        return {"in_channels": shape[1], "small_input": min(shape[2:]) < 64}
    return {}


def load_model(spec: str, shape: tuple[int, ...], kwargs: Mapping[str, Any]) -> nn.Module:
    """Build the model named by ``spec`` (``pkg.mod:factory`` or a bundled name).

    Raises
    ------
    InputError
        Unknown bundled name, module or attribute; a factory that raises or returns no
        ``torch.nn.Module``.
    """
    from torch import nn

    from flower_edge.models import MODELS

    factory: Callable[..., Any]
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise InputError(f"MODEL {spec!r}: cannot import {module_name!r}: {exc}") from None
        found = getattr(module, attr, None)
        if not callable(found):
            raise InputError(f"MODEL {spec!r}: {module_name} has no callable {attr!r}")
        factory, call_kwargs = found, dict(kwargs)
    elif spec in MODELS:
        factory, call_kwargs = MODELS[spec], {**_bundled_kwargs(spec, shape), **kwargs}
    else:
        raise InputError(
            f"MODEL {spec!r} is neither pkg.mod:factory nor a bundled model "
            f"({', '.join(sorted(MODELS))})"
        )
    try:
        model = factory(**call_kwargs)
    except Exception as exc:  # the factory is user code: any failure is bad input
        raise InputError(f"MODEL {spec!r}: the factory raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise InputError(
            f"MODEL {spec!r}: the factory returned {type(model).__name__}, not a torch.nn.Module"
        )
    return model


def _example_input(shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    import torch

    return torch.zeros(shape, dtype=getattr(torch, dtype))


def _analyze(args: argparse.Namespace, spec: str) -> ModelProfile:
    from flower_edge.operators import analyze_model

    if args.input_shape is None:
        raise InputError("--input-shape is required with --model")
    shape = parse_input_shape(args.input_shape)
    model = load_model(spec, shape, _model_kwargs(args.model_kwargs))
    return analyze_model(
        model,
        _example_input(shape, args.input_dtype),
        backward=not args.forward_only,
        share=args.share,
        execute=args.execute,
    )


# ---------------------------------------------------------------- analyze
def _si(value: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f}{unit}"
    return f"{value:.0f}"


def format_profile(profile: ModelProfile, *, every_operator: bool = False) -> str:
    """Return the readable summary of an operator profile."""
    ops = profile.operators
    n_compute = sum(o.kind == "compute" for o in ops)
    lines = [
        f"operators: {len(ops)} ({n_compute} compute-intensive, {len(ops) - n_compute} "
        f"memory-intensive); mean intensity {profile.mean_intensity:.3f} FLOP/byte",
        f"compute share p_c = {profile.compute_share:.4f}, memory share p_m = "
        f"{profile.memory_share:.4f}",
        f"total {_si(profile.total_flops)}FLOP, {_si(profile.total_bytes)}B moved; "
        f"{profile.metadata_only} metadata-only calls (views, allocations) left out",
    ]
    if profile.unmodelled:
        lines.append(
            "no cost formula (1 FLOP per output element): " + ", ".join(profile.unmodelled)
        )
    lines.append("")
    if every_operator:
        lines.append(f"{'name':<48} {'FLOPs':>9} {'bytes':>9} {'FLOP/B':>8}  kind")
        for o in ops:
            lines.append(
                f"{o.name[:48]:<48} {_si(o.flops):>9} {_si(o.bytes):>9} {o.intensity:>8.3f}  "
                f"{o.kind}"
            )
        return "\n".join(lines)
    groups: dict[str, list[Any]] = {}
    for o in ops:
        groups.setdefault(o.op, []).append(o)
    lines.append(f"{'op':<52} {'n':>4} {'compute':>7} {'FLOPs':>9} {'bytes':>9}")
    for op, members in sorted(groups.items(), key=lambda kv: -sum(o.flops for o in kv[1])):
        lines.append(
            f"{op[:52]:<52} {len(members):>4} {sum(o.kind == 'compute' for o in members):>7} "
            f"{_si(sum(o.flops for o in members)):>9} {_si(sum(o.bytes for o in members)):>9}"
        )
    return "\n".join(lines)


def run_analyze(args: argparse.Namespace) -> int:
    """Run ``flower-edge analyze``; return the exit code."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if args.json else "default", RuntimeWarning)
        profile = _analyze(args, args.model)
    if args.json:
        sys.stdout.write(json.dumps(profile.to_dict()) + "\n")
    else:
        sys.stdout.write(f"{args.model} on input {args.input_shape}\n")
        sys.stdout.write(format_profile(profile, every_operator=args.operators) + "\n")
    return 0


# ---------------------------------------------------------------- plan inputs
def _read_json(path_text: str, option: str) -> Any:
    path = Path(path_text)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{option} {path_text!r}: {exc.strerror or exc}") from None
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


def read_profiles(data: Any) -> tuple[list[str], list[list[float]], list[int | None]]:
    """Parse a profiles document into node ids, evaluations (n, 4) and capacities.

    Raises
    ------
    InputError
        Not a ``{"nodes": [...]}`` object or a list, an empty node list, a missing or
        duplicate id, or a bad resource value or capacity; the message names the entry.
    """
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
        node_id = entry.get("id")
        if not isinstance(node_id, str | int) or isinstance(node_id, bool) or node_id == "":
            raise InputError(f"{where}.id must be a non-empty string, got {node_id!r}")
        node_id = str(node_id)
        if node_id in seen:
            raise InputError(f"{where}.id {node_id!r} duplicates nodes[{seen[node_id]}].id")
        seen[node_id] = i
        capacity = validate.integer(
            f"{where}.capacity", entry.get("capacity"), low=0, allow_none=True, error=InputError
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
    k0: float,
) -> tuple[list[TimeModel], list[bool]]:
    """Fit each node's time model, or give it the match-ratio prior (module docstring)."""
    import numpy as np

    from flower_edge.allocation import TimeModel, fit_time_model

    fitted: dict[int, TimeModel] = {}
    for d, node_id in enumerate(ids):
        obs = observations.get(node_id)
        if not obs:
            continue
        try:
            fitted[d] = fit_time_model(obs)
        except InputError:  # too few points or a non-positive slope: the prior below
            continue
    usable = [d for d in fitted if ratios[d] > 0]
    if usable:
        k0 = float(np.median([fitted[d].k * ratios[d] for d in usable]))
        b0 = float(np.median([fitted[d].b for d in usable]))
    else:
        b0 = 0.0
    models: list[TimeModel] = []
    active: list[bool] = []
    for d in range(len(ids)):
        if d in fitted:
            models.append(fitted[d])
            active.append(True)
        elif ratios[d] > 0:
            models.append(TimeModel(k0 / float(ratios[d]), b0))
            active.append(True)
        else:  # no match and nothing observed: no samples
            models.append(TimeModel(k0, b0))
            active.append(False)
    return models, active


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
    seconds_per_sample: float = 1.0,
) -> tuple[dict[str, Any], Allocation]:
    """Compute the plan: scores, match ratios, initial shares and the rebalanced allocation.

    Returns
    -------
    tuple of (dict, Allocation)
        The ``plan --json`` document and the allocation behind it.
    """
    import numpy as np

    from flower_edge.allocation import initial_shares, rebalance
    from flower_edge.radar import match_ratios, standardise

    validate.integer("--total-samples", total, low=0, error=InputError)
    validate.number(
        "--seconds-per-sample", seconds_per_sample, low=0.0, low_inclusive=False, error=InputError
    )
    ev = np.asarray(evaluations, dtype=np.float64)
    scores = standardise(ev)
    ratios = match_ratios(ev, compute_share, order_invariant=order_invariant)
    models, active = _time_models(ids, ratios, observations or {}, seconds_per_sample)
    caps: list[int | None] = [c if a else 0 for c, a in zip(capacities, active, strict=True)]
    try:
        shares = initial_shares(total, ratios, capacities)
    except InputError as exc:
        raise InputError(f"--total-samples {total}: {exc}") from None
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
        "method": alloc.method,
        "makespan": alloc.makespan,
        "nodes": nodes,
    }
    return doc, alloc


def _compute_share(args: argparse.Namespace) -> float:
    if (args.model is None) == (args.compute_share is None):
        raise InputError("give exactly one of --model (with --input-shape) or --compute-share")
    if args.model is not None:
        return _analyze(args, args.model).compute_share
    share = validate.from_text(args.compute_share, float)
    return validate.probability("--compute-share", share, error=InputError)


def _int_option(text: str, option: str) -> int:
    return validate.integer(option, validate.from_text(text, int), low=0, error=InputError)


def format_plan(doc: Mapping[str, Any], other: Allocation, max_rows: int) -> str:
    """Return the readable plan table."""
    nodes = doc["nodes"]
    total = sum(n["samples"] for n in nodes)
    lines = [
        f"{len(nodes)} nodes, {total} samples; p_c = {doc['compute_share']:.4f}, "
        f"p_m = {doc['memory_share']:.4f}",
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
    try:
        k0 = float(args.seconds_per_sample)
    except ValueError:
        k0 = math.nan
    ids, evaluations, capacities = read_profiles(_read_json(args.profiles, "--profiles"))
    observations = (
        read_observations(_read_json(args.observations, "--observations"), ids)
        if args.observations
        else {}
    )
    plot = radar_plotter() if args.plot else None
    if args.plot:
        folder = Path(args.plot).parent
        if not folder.is_dir():
            raise InputError(f"--plot {args.plot!r}: folder {str(folder)!r} does not exist")
    share = _compute_share(args)
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
    )
    if plot is not None:
        plot(evaluations, share, ids, args.plot)
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
    )
    sys.stdout.write(format_plan(doc, other, max(0, args.max_rows)) + "\n")
    if not observations:
        sys.stdout.write(
            f"(no observations: times from the match-ratio prior, k = K0 / m with K0 = {k0:g})\n"
        )
    if args.plot:
        sys.stdout.write(f"radar chart: {args.plot}\n")
    return 0
