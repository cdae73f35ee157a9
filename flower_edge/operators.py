"""Operator intensity of a model (seed 000, claims 1-2; DESIGN.md step 1).

:func:`analyze_model` runs one training step of the model on an example batch (forward, a
loss, backward) under a :class:`~torch.utils._python_dispatch.TorchDispatchMode` and records
every aten operator it executes, with its FLOPs, the bytes it moves and its intensity
``FLOPs / bytes``. Operators above the mean intensity are compute-intensive, the others
memory-access-intensive; the model's shares ``p_c`` and ``p_m`` weight the radar chart
(:mod:`flower_edge.radar`).

Execution
    By default the step runs on a copy of the model on torch's ``meta`` device: shapes and
    dtypes only, no arithmetic, no memory, so a ResNet-18 on an ImageNet batch of 32 takes
    about a second of CPU time (``docs/benchmarks/seed000.md``). A model that a meta run
    cannot handle (data-dependent control flow, an op with no meta kernel) is run for real on
    a CPU copy instead; ``execute=True`` always does. The user's model is never modified.
    Attention is captured as the backend would run it: the fused CPU kernel when executed,
    the math decomposition (``bmm``, softmax) on ``meta``.

Loss
    A 2-D output ``(N, C)`` gets cross-entropy against class 0; any other output the mean of
    its squares. Targets are made outside the capture. The optimiser update is not included.

Cost conventions
    * **FLOPs.** A multiply-add is 2 FLOPs.

      - ``mm`` ``(m, k) @ (k, n)``: ``2 m k n``; ``bmm`` times the batch; ``addmm`` /
        ``baddbmm`` add one FLOP per output element for the bias; ``mv``, ``dot`` alike.
      - convolution: ``2 * N * prod(out_spatial) * weight.numel()`` (``in_spatial`` for a
        transposed convolution), plus one per output element for the bias;
        ``convolution_backward``: the same for each of grad-input and grad-weight it computes,
        one per grad-output element for grad-bias.
      - fused attention, ``S = B H S_q S_k`` scores: ``2 S (D + D_v)`` for the two products
        plus 5 per score for the softmax; backward: five products, ``2 S (3 D + 2 D_v)``
        (as ``torch.utils.flop_counter``), plus 3 per score.
      - element-wise, activation, normalisation, pooling: a small constant per output element
        (:data:`PER_OUTPUT`; e.g. 1 for ``add``/``relu``, 4 for transcendental functions, 8 for
        a training-mode batch/layer norm); pooling: the kernel's area per output element.
      - reductions, losses and the backward of normalisation and softmax: a constant per
        element of their first input (:data:`PER_INPUT`).
      - data movement (copies, concatenation, gathers, indexing, padding, factories that
        write): 0 FLOPs (:data:`DATA_MOVEMENT`).
      - an op with no formula here: 1 FLOP per output element, and a :class:`RuntimeWarning`
        naming it; it is listed like every other op (``ModelProfile.unmodelled`` names them).
    * **Bytes** = (elements of every tensor input -- parameters and buffers are inputs at this
      level -- plus elements of every tensor output) times their dtype size: each operand read
      once, each result written once, no cache reuse. An in-place op reads and writes its
      operand. Expanded (stride-0) inputs count their logical size.
    * **Metadata-only ops** (views such as ``view``, ``t``, ``transpose``, ``expand``,
      ``detach``, ``_unsafe_view``, and allocation without writing such as ``empty``) do no
      arithmetic and move no data: they are not operators of the model in the seed's sense and
      are left out of the operator list (``ModelProfile.metadata_only`` counts them).
    * **Intensity** = FLOPs / bytes (0 for an op that moves no bytes).
    * **Classification**: intensity strictly above the mean intensity over all operators ->
      ``"compute"``, otherwise ``"memory"``.
    * **Shares**: ``share="count"`` (the seed's claim 2): ``p_c = n_compute / n_ops``;
      ``share="flops"``: ``p_c`` = FLOPs of compute operators / all FLOPs. ``p_m = 1 - p_c``.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from logging import DEBUG, INFO, getLogger
from typing import Any, Literal, get_args

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from flower_edge import validate
from flower_edge.errors import InputError

__all__ = [
    "DATA_MOVEMENT",
    "INPUT_DTYPES",
    "PER_INPUT",
    "PER_OUTPUT",
    "InputDtype",
    "ModelProfile",
    "OperatorCost",
    "Share",
    "analyze_model",
    "compute_share_of",
    "op_cost",
]

logger = getLogger(__name__)

Kind = Literal["compute", "memory"]
Share = Literal["count", "flops"]
SHARES: tuple[str, ...] = get_args(Share)
#: dtypes of the example batch of :func:`compute_share_of` (``flower-edge analyze --input-dtype``)
InputDtype = Literal["float32", "float64", "int64"]
INPUT_DTYPES: tuple[str, ...] = get_args(InputDtype)


@dataclass(frozen=True)
class OperatorCost:
    """One executed aten operator and its cost.

    Attributes
    ----------
    name : str
        Where it ran: ``"fwd/<module path>/<op>"`` or ``"bwd/..."``, e.g.
        ``"fwd/CNN.features.0/convolution"``.
    op : str
        The aten overload, e.g. ``"aten.convolution.default"``.
    flops : float
        Floating-point operations (module conventions).
    bytes : float
        Bytes read and written.
    intensity : float
        ``flops / bytes``.
    kind : {"compute", "memory"}
        Compute-intensive if the intensity is above the model's mean, else memory-intensive.
    """

    name: str
    op: str
    flops: float
    bytes: float
    intensity: float
    kind: Kind

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (the ``analyze --json`` contract)."""
        return {
            "name": self.name,
            "op": self.op,
            "flops": self.flops,
            "bytes": self.bytes,
            "intensity": self.intensity,
            "kind": self.kind,
        }


@dataclass(frozen=True)
class ModelProfile:
    """The operator profile of one training step of a model.

    Attributes
    ----------
    operators : tuple of OperatorCost
        Every operator executed, in execution order (metadata-only ops left out).
    mean_intensity : float
        Mean of the operators' intensities.
    compute_share : float
        ``p_c`` in ``[0, 1]``.
    memory_share : float
        ``p_m = 1 - p_c``.
    unmodelled : tuple of str
        Ops that had no cost formula and got the fallback (1 FLOP per output element).
    includes_backward : bool
        Whether the step included the loss and the backward pass.
    metadata_only : int
        Metadata-only calls (views, allocations) that ran and were left out.
    share : {"count", "flops"}
        How ``compute_share`` was counted: by operators (the seed) or by FLOPs.
    """

    operators: tuple[OperatorCost, ...]
    mean_intensity: float
    compute_share: float
    memory_share: float
    unmodelled: tuple[str, ...] = field(default=())
    includes_backward: bool = True
    metadata_only: int = 0
    share: Share = "count"

    @property
    def total_flops(self) -> float:
        """FLOPs of the whole step."""
        return math.fsum(o.flops for o in self.operators)

    @property
    def total_bytes(self) -> float:
        """Bytes moved by the whole step."""
        return math.fsum(o.bytes for o in self.operators)

    @property
    def compute_flops(self) -> float:
        """FLOPs of the compute-intensive operators."""
        return math.fsum(o.flops for o in self.operators if o.kind == "compute")

    @property
    def memory_bytes(self) -> float:
        """Bytes moved by the memory-intensive operators."""
        return math.fsum(o.bytes for o in self.operators if o.kind == "memory")

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form (the ``analyze --json`` contract).

        ``share`` (``"count"`` or ``"flops"``) says how ``compute_share`` was counted and
        ``includes_backward`` whether the step included the loss and the backward pass.
        """
        return {
            "operators": [o.to_dict() for o in self.operators],
            "mean_intensity": self.mean_intensity,
            "compute_share": self.compute_share,
            "memory_share": self.memory_share,
            "share": self.share,
            "includes_backward": self.includes_backward,
        }


# ---------------------------------------------------------------- cost tables
def _words(text: str) -> list[str]:
    return text.split()


#: FLOPs per element of the largest output (element-wise, activations, normalisation forward)
PER_OUTPUT: dict[str, float] = {
    **dict.fromkeys(
        _words(
            "add sub rsub mul div neg abs relu relu6 threshold threshold_backward hardtanh "
            "hardtanh_backward leaky_relu leaky_relu_backward clamp clamp_min clamp_max maximum "
            "minimum eq ne lt le gt ge logical_and logical_or logical_not logical_xor bitwise_and "
            "bitwise_or bitwise_not bitwise_xor sign floor ceil round trunc remainder fmod "
            "masked_fill where reciprocal sqrt rsqrt square fill zero native_dropout_backward "
            "sigmoid_backward tanh_backward hardsigmoid hardsigmoid_backward "
            "bernoulli uniform normal rand randn rand_like randn_like"
        ),
        1.0,
    ),
    **dict.fromkeys(
        _words("addcmul addcdiv lerp native_dropout hardswish hardswish_backward elu_backward"),
        2.0,
    ),
    **dict.fromkeys(
        _words(
            "exp exp2 log log2 log10 log1p expm1 tanh sigmoid erf erfinv sin cos pow softplus "
            "elu silu mish softplus_backward"
        ),
        4.0,
    ),
    **dict.fromkeys(["silu_backward", "mish_backward"], 6.0),
    **dict.fromkeys(["gelu", "gelu_backward"], 8.0),
    **dict.fromkeys(["_softmax", "_log_softmax", "_safe_softmax"], 5.0),
    **dict.fromkeys(
        _words(
            "native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_functional "
            "_batch_norm_with_update _batch_norm_with_update_functional native_layer_norm "
            "native_group_norm"
        ),
        8.0,
    ),
    **dict.fromkeys(["_native_batch_norm_legit_no_training", "_batch_norm_no_update"], 4.0),
    "_fused_rms_norm": 5.0,
}

#: FLOPs per element of the first tensor input (reductions, losses, backward of norms/softmax)
PER_INPUT: dict[str, float] = {
    **dict.fromkeys(
        _words(
            "sum mean amax amin max min argmax argmin prod any all cumsum cumprod nansum "
            "_adaptive_avg_pool2d _adaptive_avg_pool2d_backward _adaptive_avg_pool3d "
            "_adaptive_avg_pool3d_backward adaptive_max_pool2d adaptive_max_pool2d_backward "
            "max_pool2d_with_indices_backward max_pool3d_with_indices_backward"
        ),
        1.0,
    ),
    **dict.fromkeys(["linalg_vector_norm", "norm"], 2.0),
    **dict.fromkeys(
        _words(
            "var std var_mean std_mean mse_loss mse_loss_backward smooth_l1_loss "
            "smooth_l1_loss_backward l1_loss _softmax_backward_data _log_softmax_backward_data"
        ),
        3.0,
    ),
    "logsumexp": 4.0,
    **dict.fromkeys(
        _words(
            "binary_cross_entropy binary_cross_entropy_backward binary_cross_entropy_with_logits"
        ),
        6.0,
    ),
    **dict.fromkeys(
        _words(
            "native_batch_norm_backward batch_norm_backward native_layer_norm_backward "
            "native_group_norm_backward _fused_rms_norm_backward"
        ),
        10.0,
    ),
}

#: ops that move data and do no arithmetic (0 FLOPs); ``index_add``-like ones accumulate
DATA_MOVEMENT: frozenset[str] = frozenset(
    _words(
        "clone copy _to_copy cat stack index index_select gather scatter index_put index_add "
        "scatter_add embedding embedding_dense_backward select_backward slice_backward "
        "index_select_backward zeros ones full zeros_like ones_like full_like new_zeros new_ones "
        "new_full arange repeat flip roll constant_pad_nd _unsafe_index _unsafe_index_put "
        "masked_scatter masked_select nonzero _local_scalar_dense lift_fresh_copy "
        "reflection_pad2d replication_pad2d upsample_nearest2d tril triu"
    )
)

#: aliasing or allocation-only ops that the schema does not mark as views
_METADATA_ONLY: frozenset[str] = frozenset(
    _words(
        "_unsafe_view _reshape_alias alias lift_fresh detach empty empty_like empty_strided "
        "new_empty new_empty_strided"
    )
)
_ACCUMULATING = frozenset(
    _words("index_add scatter_add embedding_dense_backward _unsafe_index_put")
)
_POOLING = frozenset(
    _words(
        "max_pool1d_with_indices max_pool2d_with_indices max_pool3d_with_indices avg_pool1d "
        "avg_pool2d avg_pool3d"
    )
)
_POOLING_BACKWARD = frozenset(["avg_pool2d_backward", "avg_pool3d_backward"])


def _numel(t: object) -> int:
    return t.numel() if isinstance(t, torch.Tensor) else 0


def _tensors(tree: object) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(tree)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def _shape(t: object) -> tuple[int, ...]:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else ()


def _matmul_flops(name: str, args: Sequence[Any], out: object) -> float:
    """FLOPs of the matrix-product family, from operand shapes."""
    if name in ("mm", "bmm"):
        a, b = _shape(args[0]), _shape(args[1])
        return 2.0 * math.prod(a) * b[-1]
    if name in ("addmm", "baddbmm", "addbmm"):
        a, b = _shape(args[1]), _shape(args[2])
        return 2.0 * math.prod(a) * b[-1] + _numel(out)
    if name in ("mv", "dot", "vdot"):
        return 2.0 * _numel(args[0])
    if name == "addmv":
        return 2.0 * _numel(args[1]) + _numel(out)
    raise KeyError(name)  # pragma: no cover - callers check _MATMUL


_MATMUL = frozenset(["mm", "bmm", "addmm", "baddbmm", "addbmm", "mv", "dot", "vdot", "addmv"])


def _conv_macs(inp: object, weight: object, out_spatial: Sequence[int], transposed: bool) -> float:
    """Multiply-adds of a convolution: batch x spatial positions x weight elements."""
    x = _shape(inp)
    w = _shape(weight)
    spatial = len(w) - 2
    batch = x[0] if len(x) == spatial + 2 else 1
    positions = math.prod(x[-spatial:]) if transposed else math.prod(out_spatial)
    return float(batch) * positions * math.prod(w)


def _conv_flops(args: Sequence[Any], out: object) -> float:
    """FLOPs of ``aten.convolution(input, weight, bias, stride, pad, dil, transposed, ...)``."""
    inp, weight, bias, transposed = args[0], args[1], args[2], bool(args[6])
    spatial = len(_shape(weight)) - 2
    y = _shape(out)
    flops = 2.0 * _conv_macs(inp, weight, y[-spatial:], transposed)
    return flops + (_numel(out) if bias is not None else 0.0)


def _conv_backward_flops(args: Sequence[Any]) -> float:
    """FLOPs of ``aten.convolution_backward(grad_out, input, weight, ..., output_mask)``."""
    grad_out, inp, weight = args[0], args[1], args[2]
    transposed, mask = bool(args[7]), args[10]
    spatial = len(_shape(weight)) - 2
    macs = _conv_macs(inp, weight, _shape(grad_out)[-spatial:], transposed)
    return 2.0 * macs * (int(bool(mask[0])) + int(bool(mask[1]))) + (
        _numel(grad_out) if mask[2] else 0.0
    )


def _attention_flops(name: str, args: Sequence[Any]) -> float:
    """FLOPs of fused scaled-dot-product attention kernels (forward or backward)."""
    backward = name.endswith("_backward")
    q, k, v = (args[1], args[2], args[3]) if backward else (args[0], args[1], args[2])
    qs, ks, vs = _shape(q), _shape(k), _shape(v)
    heads_batch = math.prod(qs[:-2])
    scores = heads_batch * qs[-2] * ks[-2]
    if backward:  # recompute Q K^T; grads through P V (2 products) and Q K^T (2 products)
        return 2.0 * scores * (3 * qs[-1] + 2 * vs[-1]) + 3.0 * scores
    return 2.0 * scores * (qs[-1] + vs[-1]) + 5.0 * scores


def _pool_flops(name: str, args: Sequence[Any], out: object) -> float:
    """FLOPs of pooling: kernel area per output element (forward) / grad-output element."""
    kernel_arg = args[2] if name in _POOLING_BACKWARD else args[1]
    kernel = [int(kernel_arg)] if isinstance(kernel_arg, int) else [int(v) for v in kernel_arg]
    dims = int(name[name.index("pool") + 4]) if name[name.index("pool") + 4].isdigit() else 2
    area = math.prod(kernel) if len(kernel) > 1 else kernel[0] ** dims
    basis = _numel(args[0]) if name in _POOLING_BACKWARD else _numel(_tensors(out)[0])
    return float(basis) * area


def op_cost(
    func: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any], out: object
) -> tuple[float, float, bool]:
    """Return ``(flops, bytes, modelled)`` of one aten call (see the module conventions).

    Parameters
    ----------
    func : torch._ops.OpOverload
        The aten overload that ran.
    args, kwargs : sequence, dict
        Its arguments.
    out : object
        What it returned.

    Returns
    -------
    tuple of (float, float, bool)
        FLOPs, bytes moved, and whether a formula covered the op (``False``: fallback).
    """
    name = func.overloadpacket.__name__.rstrip("_")
    inputs = _tensors((args, kwargs))
    outputs = _tensors(out)
    moved = float(
        sum(t.numel() * t.element_size() for t in inputs)
        + sum(t.numel() * t.element_size() for t in outputs)
    )
    largest_out = max((t.numel() for t in outputs), default=0)
    first_in = inputs[0].numel() if inputs else 0
    try:
        flops = _formula_flops(name, args, out, largest_out, first_in)
    except (IndexError, TypeError, ValueError, AttributeError):  # an unexpected signature
        flops = None
    if flops is None:
        return float(largest_out), moved, False
    return flops, moved, True


def _formula_flops(
    name: str, args: Sequence[Any], out: object, largest_out: int, first_in: int
) -> float | None:
    """FLOPs of op ``name`` by the module's conventions; ``None`` when there is no formula."""
    if name in _MATMUL:
        flops = _matmul_flops(name, args, out)
    elif name in ("convolution", "_convolution"):
        flops = _conv_flops(args, out)
    elif name == "convolution_backward":
        flops = _conv_backward_flops(args)
    elif name.startswith(("_scaled_dot_product_", "_flash_attention", "_efficient_attention")):
        flops = _attention_flops(name, args)
    elif name in _POOLING or name in _POOLING_BACKWARD:
        flops = _pool_flops(name, args, out)
    elif name in ("nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward"):
        flops = float(_numel(args[1] if name == "nll_loss_forward" else args[2]))
    elif name in PER_OUTPUT:
        flops = PER_OUTPUT[name] * largest_out
    elif name in PER_INPUT:
        flops = PER_INPUT[name] * first_in
    elif name in DATA_MOVEMENT:
        flops = float(largest_out) if name in _ACCUMULATING else 0.0
    else:
        return None
    return flops


def _is_metadata_only(func: torch._ops.OpOverload) -> bool:
    return bool(func.is_view) or func.overloadpacket.__name__ in _METADATA_ONLY


# ---------------------------------------------------------------- capture
class _Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call,misc]
    """Dispatch mode that prices each aten call as it runs; keeps no tensors."""

    def __init__(self, tracker: Any) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.tracker = tracker
        self.calls: list[tuple[str, str, float, float]] = []  # name, op, flops, bytes
        self.unmodelled: dict[str, None] = {}
        self.skipped = 0

    def _where(self) -> str:
        parents = [p for p in self.tracker.parents if p != "Global"]
        module = max(parents, key=lambda p: (p.count("."), len(p)), default="(loss)")
        return f"{'bwd' if self.tracker.is_bw else 'fwd'}/{module}"

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if _is_metadata_only(func):
            self.skipped += 1
            return out
        flops, moved, modelled = op_cost(func, args, kwargs, out)
        if not modelled:
            self.unmodelled[str(func)] = None
        packet = func.overloadpacket.__name__
        self.calls.append((f"{self._where()}/{packet}", str(func), flops, moved))
        return out


def _loss_target(out: object) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """Return the output to take the loss of, and a class-0 target for ``(N, C)`` logits."""
    tensors = [t for t in _tensors(out) if t.is_floating_point() and t.requires_grad]
    if not tensors:
        return None
    y = tensors[0]
    if y.dim() == 2 and y.shape[1] > 1:
        return y, torch.zeros(y.shape[0], dtype=torch.long, device=y.device)
    return y, None


def _copy(model: nn.Module) -> nn.Module:
    """Return a deep copy of ``model`` (the analysis never touches the user's model)."""
    try:
        return copy.deepcopy(model)
    except Exception as exc:  # deepcopy can fail in any way a custom module chooses
        raise InputError(f"model: cannot copy {type(model).__name__} to analyse it: {exc}") from exc


def _run_step(model: nn.Module, x: torch.Tensor, device: str, backward: bool) -> _Recorder:
    """Run one training step of ``model`` (a copy, moved to ``device``) under the recorder."""
    from torch.utils.module_tracker import ModuleTracker

    work = model.to(device)
    work.train()
    x = x.detach().to(device)
    tracker = ModuleTracker()
    recorder = _Recorder(tracker)
    with tracker:
        with recorder:
            out = work(x)
        found = _loss_target(out) if backward else None  # targets made outside the capture
        if backward and found is None:
            logger.log(INFO, "model output has no gradient: forward pass only")
        if found is not None:
            y, target = found
            with recorder:
                if target is not None:
                    loss = nn.functional.cross_entropy(y, target)
                else:
                    loss = y.float().square().mean()
                torch.autograd.backward(loss)
    return recorder


def analyze_model(
    model: nn.Module,
    example_input: torch.Tensor,
    *,
    backward: bool = True,
    share: Share = "count",
    execute: bool = False,
) -> ModelProfile:
    """Capture and price every operator of one training step of ``model``.

    Parameters
    ----------
    model : torch.nn.Module
        The model (left untouched: a copy runs).
    example_input : torch.Tensor
        One batch, e.g. ``torch.zeros(32, 1, 28, 28)``; its dtype is kept.
    backward : bool (default: True)
        Include the loss and the backward pass (a training step); ``False``: forward only.
    share : {"count", "flops"} (default: "count")
        How ``p_c`` is counted: by operators (the seed) or by FLOPs.
    execute : bool (default: False)
        Run for real on the CPU instead of shapes-only on the ``meta`` device.

    Returns
    -------
    ModelProfile
        Operators in execution order, mean intensity and the shares.

    Raises
    ------
    InputError
        ``model`` is not a module, ``example_input`` not a tensor, an unknown ``share``, the
        input does not fit the model, or the step executes no operator.
    """
    validate.choice("share", share, SHARES, error=InputError)
    if not isinstance(model, nn.Module):
        raise InputError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(example_input, torch.Tensor):
        raise InputError(
            f"example_input must be a torch.Tensor, got {type(example_input).__name__}"
        )
    recorder = None
    if not execute:
        work = _copy(model)
        try:
            recorder = _run_step(work, example_input, "meta", backward)
        except Exception as exc:  # the model's own code: retry for real, on the CPU
            logger.log(INFO, "shape-only (meta) run failed (%s); running on the CPU", exc)
    if recorder is None:
        work = _copy(model)
        try:
            recorder = _run_step(work, example_input, "cpu", backward)
        except Exception as exc:  # the model's own code rejects the input
            raise InputError(
                f"input shape {tuple(example_input.shape)} does not fit the model "
                f"({type(model).__name__}): {exc}"
            ) from exc
    logger.log(DEBUG, "left out %s metadata-only calls (views, allocations)", recorder.skipped)
    if recorder.unmodelled:
        warnings.warn(
            "no cost formula for "
            + ", ".join(recorder.unmodelled)
            + ": counted as 1 FLOP per output element",
            RuntimeWarning,
            stacklevel=2,
        )
    profile = _profile(recorder.calls, share, tuple(recorder.unmodelled))
    backward_ran = any(name.startswith("bwd/") for name, _, _, _ in recorder.calls)
    return replace(profile, includes_backward=backward_ran, metadata_only=recorder.skipped)


def compute_share_of(
    model: nn.Module | Callable[[], nn.Module],
    input_shape: Sequence[int],
    *,
    share: Share = "count",
    input_dtype: InputDtype = "float32",
) -> float:
    """Return ``p_c`` of a model: its compute-intensive operator share on one training step.

    The served model's ``p_c`` distorts the radar chart of seed 000 (compute axes have
    length ``p_c``, storage axes ``1 - p_c``). A server that knows the model it serves runs
    this once, before the first round (e.g. ``ShareConfig(compute_share="auto",
    model=factory, input_shape=(32, 64))``); on the ``meta`` device a small model takes a
    fraction of a second (see :func:`analyze_model`).

    Parameters
    ----------
    model : torch.nn.Module or callable
        The model, or a factory that returns it (called once).
    input_shape : sequence of int
        Shape of one float32 training batch, batch first (e.g. ``(32, 64)``); every entry
        ``>= 1``.
    share : {"count", "flops"} (default: "count")
        How ``p_c`` is counted: by operators (the seed) or by FLOPs.
    input_dtype : {"float32", "float64", "int64"} (default: "float32")
        dtype of the example batch (zeros): ``"int64"`` for a model that takes integer
        inputs, such as the token ids of an ``nn.Embedding``.

    Returns
    -------
    float
        ``p_c`` in ``[0, 1]`` (0.40 for the bundled digits MLP).

    Raises
    ------
    InputError
        A factory that does not return a module, a bad ``input_shape``, or any reason of
        :func:`analyze_model`.
    """
    validate.choice("input_dtype", input_dtype, INPUT_DTYPES, error=InputError)
    shape = tuple(input_shape)
    if len(shape) < 2 or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape
    ):
        raise InputError(
            f"input_shape must be batch-first with at least 2 dims, every dim an int >= 1, "
            f"got {shape}"
        )
    built = model if isinstance(model, nn.Module) else model()
    if not isinstance(built, nn.Module):
        raise InputError(f"model factory must return a torch.nn.Module, got {type(built).__name__}")
    example = torch.zeros(shape, dtype=getattr(torch, input_dtype))
    return analyze_model(built, example, share=share).compute_share


def _profile(
    calls: Sequence[tuple[str, str, float, float]], share: Share, unmodelled: tuple[str, ...]
) -> ModelProfile:
    """Classify priced calls by the mean intensity and compute the shares."""
    if not calls:
        raise InputError("model: the training step executed no operator to analyse")
    intensities = [f / b if b > 0 else 0.0 for _, _, f, b in calls]
    mean = math.fsum(intensities) / len(intensities)
    exact_sum = sum(map(Fraction, intensities), Fraction(0))

    def above(i: float) -> bool:
        # the rounded mean can fall below an operator exactly at the mean (six ops of one
        # intensity were all "compute"): near the mean, compare n * i with the exact sum
        if abs(i - mean) > 1e-9 * abs(mean):
            return i > mean
        return Fraction(i) * len(intensities) > exact_sum

    ops = tuple(
        OperatorCost(name, op, f, b, i, "compute" if above(i) else "memory")
        for (name, op, f, b), i in zip(calls, intensities, strict=True)
    )
    if share == "count":
        p_c = sum(o.kind == "compute" for o in ops) / len(ops)
    else:
        total = math.fsum(o.flops for o in ops)
        p_c = math.fsum(o.flops for o in ops if o.kind == "compute") / total if total else 0.0
    return ModelProfile(ops, mean, p_c, 1.0 - p_c, unmodelled, share=share)
