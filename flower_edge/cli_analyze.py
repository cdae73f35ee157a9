"""``flower-edge analyze``: operator intensity of a model's training step, and model loading.

``flower-edge analyze MODEL --input-shape 32,1,28,28 [--json]``
    Operator intensity of one training step of MODEL (:mod:`flower_edge.operators`). MODEL is
    ``pkg.mod:factory`` (a callable that takes no argument and returns a ``torch.nn.Module``)
    or a bundled model's name (:data:`flower_edge.models.MODELS`); a bundled model is sized to
    the input shape (input features, channels, image size) unless ``--model-kwargs`` says
    otherwise. ``--json`` prints only ``ModelProfile.to_dict()``.

The model options (``--input-shape``, ``--input-dtype``, ``--model-kwargs``, ``--share``,
``--forward-only``, ``--execute``) are shared with ``flower-edge plan --model``
(:func:`add_model_options`, :func:`analyze_args`).

In the default (shapes-only) mode the step runs on the ``meta`` device, whose kernels check
shapes but not every dtype rule; a forward pass on a batch of at most two samples of the given
dtype, on the CPU, checks that the input fits the model before the analysis
(:func:`check_input_fits`). The example batch is allocated for real either way (the analysis
falls back to the CPU when the model cannot run on ``meta``), so ``--input-shape`` may hold at
most :data:`MAX_INPUT_ELEMENTS` elements.

Exit codes: 0 success, 2 bad input (unknown model, a factory that raises, an input shape or
dtype that does not fit, a batch too large to allocate).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from flower_edge.errors import InputError

if TYPE_CHECKING:
    import torch
    from torch import nn

    from flower_edge.operators import ModelProfile

__all__ = [
    "MAX_INPUT_ELEMENTS",
    "add_model_options",
    "add_parser",
    "analyze_args",
    "check_input_fits",
    "format_profile",
    "load_model",
    "parse_input_shape",
    "run",
    "run_analyze",
]

#: most elements of the example batch (``--input-shape``): 2**28, 1 GiB of float32
MAX_INPUT_ELEMENTS = 2**28
#: samples of the batch that checks the fit of the input in the shapes-only mode
_FIT_CHECK_SAMPLES = 2


# ---------------------------------------------------------------- parser
def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``analyze`` sub-command."""
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
    add_model_options(analyze, required=True)
    analyze.add_argument("--json", action="store_true", help="print only the JSON profile")
    analyze.add_argument(
        "--operators", action="store_true", help="list every operator, not a summary per op"
    )
    analyze.set_defaults(run=run)
    return analyze  # type: ignore[no-any-return]


def add_model_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """Add the options that describe the model's example batch and its analysis."""
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
        help=(
            "keyword arguments for the model factory, e.g. '{\"hidden\": 32}' (mlp) or "
            "'{\"width\": 32}' (cnn, cnn1d, resnet18)"
        ),
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
    """Run ``flower-edge analyze``; return the exit code."""
    return run_analyze(args)


# ---------------------------------------------------------------- model loading
def parse_input_shape(text: str) -> tuple[int, ...]:
    """Parse ``"32,1,28,28"`` (or ``"32x1x28x28"``) into a shape of positive integers.

    Raises
    ------
    InputError
        Naming ``--input-shape``: an empty or non-integer field, an entry < 1, or more than
        :data:`MAX_INPUT_ELEMENTS` elements in all.
    """
    fields = text.replace("x", ",").split(",")
    try:
        shape = tuple(int(v) for v in fields)  # int() accepts surrounding blanks, not ""
    except ValueError:
        shape = ()
    if not shape or any(v <= 0 for v in shape):
        raise InputError(
            f"--input-shape must be comma-separated integers >= 1 (e.g. 32,1,28,28), got {text!r}"
        )
    elements = math.prod(shape)
    if elements > MAX_INPUT_ELEMENTS:
        raise InputError(
            f"--input-shape {text!r} holds {elements:.3g} elements; an example batch may hold at "
            f"most {MAX_INPUT_ELEMENTS} (2**28): use a smaller batch"
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
        Unknown bundled name, module or attribute, a malformed ``pkg.mod:factory``, a module
        that raises as it is imported, a model instance instead of a factory; a factory that
        raises or returns no ``torch.nn.Module``.
    """
    from torch import nn

    from flower_edge.models import MODELS, build_model

    factory: Callable[..., Any]
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        if not module_name or module_name.startswith(".") or not attr:
            raise InputError(
                f"MODEL {spec!r}: expected pkg.mod:factory, an absolute module path and the "
                "name of a factory in it (e.g. mypkg.models:make_net)"
            )
        try:
            module = _import_user_module(module_name)
        except ImportError as exc:
            raise InputError(f"MODEL {spec!r}: cannot import {module_name!r}: {exc}") from None
        except Exception as exc:  # user code that fails as it is imported is bad input too
            raise InputError(
                f"MODEL {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
            ) from None
        found = getattr(module, attr, None)
        if isinstance(found, nn.Module):  # callable too: it was called with no input
            cls = type(found)
            own = (
                f"its class ({module_name}:{cls.__name__}) or "
                if cls.__module__ == module_name
                else ""
            )
            raise InputError(
                f"MODEL {spec!r} is a torch.nn.Module instance ({cls.__name__}), not a factory; "
                f"name {own}a function that returns a new model"
            )
        if not callable(found):
            raise InputError(f"MODEL {spec!r}: {module_name} has no callable {attr!r}")
        factory, call_kwargs = found, dict(kwargs)
    elif spec in MODELS:
        factory, call_kwargs = (
            partial(build_model, spec),
            {**_bundled_kwargs(spec, shape), **kwargs},
        )
    else:
        raise InputError(
            f"MODEL {spec!r} is neither pkg.mod:factory nor a bundled model "
            f"({', '.join(sorted(MODELS))})"
        )
    try:
        model = factory(**call_kwargs)
    except InputError as exc:  # a bundled model's check: the message names the keyword
        raise InputError(f"MODEL {spec!r}: {exc}") from exc
    except Exception as exc:  # the factory is user code: any failure is bad input
        raise InputError(f"MODEL {spec!r}: the factory raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise InputError(
            f"MODEL {spec!r}: the factory returned {type(model).__name__}, not a torch.nn.Module"
        )
    return model


def _import_user_module(name: str) -> Any:
    """Import ``name``, also from the current folder, as ``python -m`` and Flower apps do.

    The ``flower-edge`` script's ``sys.path`` starts at its own ``bin`` folder, so a model
    file beside the user (``mymodel.py``, ``flower-edge analyze mymodel:make``) was "No module
    named 'mymodel'" (found by a new-user probe). The current folder is tried after the
    installed packages, so it shadows none of them.
    """
    import os
    import sys

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        here = os.getcwd()
        if exc.name != name.partition(".")[0] or here in sys.path or "" in sys.path:
            raise
        sys.path.append(here)
        return importlib.import_module(name)


def _example_input(
    shape: tuple[int, ...], dtype: str, given: tuple[int, ...] | None = None
) -> torch.Tensor:
    """Allocate a batch of ``shape``; a failure is bad input naming ``--input-shape``.

    ``given`` is the ``--input-shape`` that the message names (default: ``shape``), when
    ``shape`` is a part of it (the fit check's batch).
    """
    import torch

    try:
        return torch.zeros(shape, dtype=getattr(torch, dtype))
    except (RuntimeError, MemoryError) as exc:
        raise InputError(
            f"--input-shape {','.join(map(str, given or shape))}: cannot allocate a batch of "
            f"{math.prod(shape)} {dtype} elements: {_first_line(exc)}"
        ) from None


def _first_line(exc: BaseException) -> str:
    """Return the first line of an exception's message (its type name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_input_fits(model: nn.Module, shape: tuple[int, ...], dtype: str) -> None:
    """Run the model's forward pass on a small CPU batch of ``dtype`` to check that it fits.

    The shapes-only analysis runs on the ``meta`` device, whose kernels check shapes but not
    every dtype rule (an ``int64`` batch goes through a float ``Linear`` there). This runs the
    forward pass for real on at most two samples of the batch (the first dimension), in eval
    mode and without gradients, so that batch-norm statistics and parameters stay as they are.

    Parameters
    ----------
    model : torch.nn.Module
        The model to check (its training mode is restored).
    shape : tuple of int
        The example batch shape, batch first.
    dtype : str
        The example batch dtype (a ``torch`` attribute name, e.g. ``"float32"``).

    Raises
    ------
    InputError
        The forward pass raises; the message names ``--input-shape`` and ``--input-dtype``.
    """
    import torch

    small = (min(shape[0], _FIT_CHECK_SAMPLES), *shape[1:]) if len(shape) > 1 else shape
    x = _example_input(small, dtype, given=shape)
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(x)
    except Exception as exc:  # the model's own code rejects the input
        raise InputError(
            f"input shape {shape} ({dtype}) does not fit the model ({type(model).__name__}): "
            f"{_first_line(exc)}; check --input-shape and --input-dtype"
        ) from exc
    finally:
        model.train(training)


def analyze_args(args: argparse.Namespace, spec: str) -> ModelProfile:
    """Load the model ``spec`` and analyse it with the model options in ``args``.

    In the default (shapes-only) mode the input's fit is checked first on a small CPU batch
    (:func:`check_input_fits`); with ``--execute`` the step itself runs on the CPU.
    """
    from flower_edge.operators import analyze_model

    if args.input_shape is None:
        raise InputError("--input-shape is required with --model")
    shape = parse_input_shape(args.input_shape)
    model = load_model(spec, shape, _model_kwargs(args.model_kwargs))
    if not args.execute:
        check_input_fits(model, shape, args.input_dtype)
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
        profile = analyze_args(args, args.model)
    if args.json:
        sys.stdout.write(json.dumps(profile.to_dict()) + "\n")
    else:
        sys.stdout.write(f"{args.model} on input {args.input_shape}\n")
        sys.stdout.write(format_profile(profile, every_operator=args.operators) + "\n")
    return 0
