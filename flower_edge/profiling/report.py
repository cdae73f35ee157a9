"""Typed records of a resource profile, seed formulas 3 and 4, and the JSON contract.

A compute node is rated on four resources, in the seed's axis order :data:`RESOURCES`
(C, G, M, D). For every resource r the node runs single-resource-intensive workloads w; each
yields a :class:`WorkloadResult` with the samples processed (``Capacity_w``), the completion
time ``Time_{w,d}``, the utilisation ``U_{w,d}`` of r and the task execution intensity

* seed formula 3: ``E_{w,d} = Capacity_w / Time_{w,d}`` (:func:`execution_intensity`),

and the resource gets its evaluation

* seed formula 4: ``N_{r,d} = (1/n) * sum_{w in W_r} U_{w,d} * E_{w,d}``
  (:func:`resource_evaluation`; 0 for a resource without workloads, e.g. no GPU).

The records are frozen dataclasses validated in ``__post_init__``, so that a simulated device
can build a :class:`ProfileReport` from plain numbers and a server can trust one parsed from
a client's JSON with :meth:`ProfileReport.from_json`. The JSON contract (issue 2) is::

    {"host": {"cores": int, "cpu_model": str, "memory_bytes": int, "gpu_name": str | null,
              "load_average": [float, float, float], "platform": str},
     "resources": {"cpu": {"available": bool, "evaluation": float, "reason": str | null,
                           "workloads": [{"name": str, "samples": int, "seconds": float,
                                          "utilization": float in [0, 1],
                                          "intensity": float}, ...]},
                   "gpu": {...}, "memory": {...}, "disk": {...}},
     "mode": "quick" | "full",
     "elapsed_seconds": float}

Consistency is part of validation: a workload's ``intensity`` must equal
``samples / seconds`` and a resource's ``evaluation`` must equal formula 4 over its workloads
(relative tolerance :data:`REL_TOL`); an unavailable resource has no workloads, evaluation 0
and a reason. Use :meth:`WorkloadResult.measured`, :meth:`ResourceReport.from_workloads` and
:meth:`ResourceReport.absent` to build records that satisfy this by construction.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol, cast, get_args, runtime_checkable

from flower_edge import validate
from flower_edge.errors import InputError

__all__ = [
    "MAX_JSON_CHARS",
    "MAX_SAMPLES",
    "MAX_SECONDS",
    "MAX_WORKLOADS",
    "MODES",
    "REL_TOL",
    "RESOURCES",
    "HostFacts",
    "Mode",
    "ProfileReport",
    "ResourceProbe",
    "ResourceReport",
    "WorkloadResult",
    "execution_intensity",
    "resource_evaluation",
]

#: the resources a node is rated on, in the seed's radar-axis order C, G, M, D
RESOURCES: Final[tuple[str, str, str, str]] = ("cpu", "gpu", "memory", "disk")

Mode = Literal["quick", "full"]
#: allowed profiling modes
MODES: Final[tuple[str, ...]] = get_args(Mode)

#: largest ``samples`` a workload may report (far above any real benchmark)
MAX_SAMPLES: Final = 10**12
#: largest ``seconds`` a workload or a profile may report (one week)
MAX_SECONDS: Final = 7 * 24 * 3600.0
#: most workloads per resource accepted from a report
MAX_WORKLOADS: Final = 64
#: longest JSON text :meth:`ProfileReport.from_json` accepts
MAX_JSON_CHARS: Final = 1_000_000
#: relative tolerance of the consistency checks (intensity, evaluation)
REL_TOL: Final = 1e-6
_MAX_TEXT: Final = 256


# ---------------------------------------------------------------- formulas


def execution_intensity(capacity: int, seconds: float) -> float:
    """Return the task execution intensity ``E = Capacity / Time`` (seed formula 3).

    Parameters
    ----------
    capacity : int
        Training samples the workload processed, ``>= 1``.
    seconds : float
        Completion time of the workload in seconds, finite and ``> 0``.

    Returns
    -------
    float
        Samples per second.

    Raises
    ------
    InputError
        When ``capacity`` is not a positive integer, ``seconds`` is not finite and positive,
        or the ratio overflows a float.
    """
    _check_int("capacity", capacity, 1, MAX_SAMPLES)
    _check_float("seconds", seconds, 0.0, MAX_SECONDS, low_open=True)
    intensity = capacity / float(seconds)
    if not math.isfinite(intensity):  # a subnormal time: capacity / seconds overflows
        raise InputError(
            f"seconds={seconds!r} is too short for {capacity} samples: capacity / seconds "
            "overflows a float (seed formula 3)"
        )
    return intensity


def resource_evaluation(workloads: Sequence[WorkloadResult]) -> float:
    """Return a resource's evaluation ``N = (1/n) * sum_w U_w * E_w`` (seed formula 4).

    Parameters
    ----------
    workloads : Sequence[WorkloadResult]
        The single-resource-intensive workloads run for one resource.

    Returns
    -------
    float
        The mean of utilisation times intensity over the workloads; ``0.0`` for none
        (a resource the node lacks).
    """
    if len(workloads) == 0:
        return 0.0
    n = len(workloads)
    # each term divided first: the sum of terms near the largest float cannot overflow
    return math.fsum(w.utilization * w.intensity / n for w in workloads)


# ---------------------------------------------------------------- validation helpers


def _check_int(name: str, value: object, low: int, high: int) -> int:
    return validate.integer(name, value, low=low, high=high, error=InputError)


def _check_float(
    name: str, value: object, low: float, high: float, *, low_open: bool = False
) -> float:
    return validate.number(
        name, value, low=low, high=high, low_inclusive=not low_open, error=InputError
    )


def _check_text(name: str, value: object, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise InputError(f"{name} must be a string, got {type(value).__name__}")
    if len(value) > _MAX_TEXT:
        raise InputError(f"{name} must be at most {_MAX_TEXT} characters, got {len(value)}")
    if not empty and not value.strip():
        raise InputError(f"{name} must be a non-empty string")
    return value


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)


def _mapping(name: str, value: object, keys: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(f"{name} must be a JSON object, got {type(value).__name__}")
    missing = [k for k in keys if k not in value]
    if missing:
        raise InputError(f"{name} is missing key(s) {', '.join(missing)}; required: {keys}")
    extra = sorted(str(k) for k in value if k not in keys)
    if extra:
        raise InputError(f"{name} has unknown key(s) {', '.join(extra)}; allowed: {keys}")
    return cast(Mapping[str, Any], value)


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class WorkloadResult:
    """One single-resource-intensive workload as run on one node.

    Parameters
    ----------
    name : str
        Workload name, e.g. ``"cpu-dense"``.
    samples : int
        ``Capacity_w``: synthetic training samples processed, in ``[1, MAX_SAMPLES]``.
    seconds : float
        ``Time_{w,d}``: completion time (median over repeats), in ``(0, MAX_SECONDS]``.
    utilization : float
        ``U_{w,d}``: utilisation of the workload's resource while it ran, in ``[0, 1]``.
    intensity : float
        ``E_{w,d} = samples / seconds`` (seed formula 3), samples per second.
    """

    name: str
    samples: int
    seconds: float
    utilization: float
    intensity: float

    def __post_init__(self) -> None:
        _check_text("workload name", self.name, empty=False)
        label = f"workload {self.name!r}"
        _check_int(f"{label} samples", self.samples, 1, MAX_SAMPLES)
        seconds = _check_float(f"{label} seconds", self.seconds, 0.0, MAX_SECONDS, low_open=True)
        utilization = _check_float(f"{label} utilization", self.utilization, 0.0, 1.0)
        intensity = _check_float(f"{label} intensity", self.intensity, 0.0, math.inf)
        expected = self.samples / seconds
        if not _close(intensity, expected):
            raise InputError(
                f"{label} intensity must equal samples / seconds = {expected:.6g} "
                f"(seed formula 3), got {intensity:.6g}"
            )
        object.__setattr__(self, "seconds", seconds)
        object.__setattr__(self, "utilization", utilization)
        object.__setattr__(self, "intensity", intensity)

    @classmethod
    def measured(
        cls, name: str, samples: int, seconds: float, utilization: float
    ) -> WorkloadResult:
        """Build a result from a measurement, computing ``intensity`` by seed formula 3."""
        return cls(name, samples, seconds, utilization, execution_intensity(samples, seconds))

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready dict of the contract."""
        return {
            "name": self.name,
            "samples": self.samples,
            "seconds": self.seconds,
            "utilization": self.utilization,
            "intensity": self.intensity,
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "workload") -> WorkloadResult:
        """Parse and validate one workload dict; raise :class:`InputError` naming the field."""
        d = _mapping(where, data, ("name", "samples", "seconds", "utilization", "intensity"))
        try:
            samples = validate.whole(d["samples"])  # JSON writers may emit 400.0 for 400
            return cls(d["name"], samples, d["seconds"], d["utilization"], d["intensity"])
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class ResourceReport:
    """The rating of one resource on one node.

    Parameters
    ----------
    available : bool
        Whether the node has the resource (and it could be benchmarked).
    evaluation : float
        ``N_{r,d}`` (seed formula 4) over ``workloads``; 0 when unavailable.
    workloads : tuple[WorkloadResult, ...]
        The workloads run, at least one when available, none when unavailable.
    reason : str | None
        Why the resource is unavailable (required then); ``None`` or a note otherwise.
    """

    available: bool
    evaluation: float
    workloads: tuple[WorkloadResult, ...] = ()
    reason: str | None = None

    def __post_init__(self) -> None:
        validate.boolean("available", self.available, error=InputError)
        if isinstance(self.workloads, str | bytes) or not isinstance(self.workloads, Sequence):
            raise InputError(f"workloads must be a sequence, got {type(self.workloads).__name__}")
        workloads = tuple(self.workloads)
        if len(workloads) > MAX_WORKLOADS:
            raise InputError(f"workloads must hold at most {MAX_WORKLOADS}, got {len(workloads)}")
        for item in workloads:
            if not isinstance(item, WorkloadResult):
                raise InputError(f"workloads must hold WorkloadResult, got {type(item).__name__}")
        names = [w.name for w in workloads]
        if len(set(names)) != len(names):
            raise InputError(f"workload names must be unique, got {names}")
        evaluation = _check_float("evaluation", self.evaluation, 0.0, math.inf)
        if self.reason is not None:
            _check_text("reason", self.reason)
        if self.available:
            self._check_available(workloads, evaluation)
        else:
            self._check_absent(workloads, evaluation)
        object.__setattr__(self, "workloads", workloads)
        object.__setattr__(self, "evaluation", evaluation)

    @staticmethod
    def _check_available(workloads: tuple[WorkloadResult, ...], evaluation: float) -> None:
        if not workloads:
            raise InputError("an available resource needs at least one workload, got none")
        expected = resource_evaluation(workloads)
        if not _close(evaluation, expected):
            raise InputError(
                f"evaluation must equal mean(utilization * intensity) = {expected:.6g} "
                f"(seed formula 4), got {evaluation:.6g}"
            )

    def _check_absent(self, workloads: tuple[WorkloadResult, ...], evaluation: float) -> None:
        if workloads:
            raise InputError(f"an unavailable resource has no workloads, got {len(workloads)}")
        if evaluation != 0.0:
            raise InputError(f"an unavailable resource has evaluation 0, got {evaluation}")
        if self.reason is None or not self.reason.strip():
            raise InputError("an unavailable resource needs a non-empty reason")

    @classmethod
    def from_workloads(
        cls, workloads: Sequence[WorkloadResult], reason: str | None = None
    ) -> ResourceReport:
        """Build an available resource, its evaluation by seed formula 4."""
        return cls(True, resource_evaluation(workloads), tuple(workloads), reason)

    @classmethod
    def absent(cls, reason: str) -> ResourceReport:
        """Build an unavailable resource (evaluation 0) with the reason."""
        return cls(False, 0.0, (), reason)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready dict of the contract."""
        return {
            "available": self.available,
            "evaluation": self.evaluation,
            "workloads": [w.to_dict() for w in self.workloads],
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "resource") -> ResourceReport:
        """Parse and validate one resource dict; raise :class:`InputError` naming the field."""
        d = _mapping(where, data, ("available", "evaluation", "workloads", "reason"))
        raw = d["workloads"]
        if not isinstance(raw, list):
            raise InputError(f"{where}.workloads must be a list, got {type(raw).__name__}")
        if len(raw) > MAX_WORKLOADS:
            raise InputError(f"{where}.workloads must hold at most {MAX_WORKLOADS}, got {len(raw)}")
        workloads = tuple(
            WorkloadResult.from_dict(item, f"{where}.workloads[{i}]") for i, item in enumerate(raw)
        )
        try:
            return cls(d["available"], d["evaluation"], workloads, d["reason"])
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class HostFacts:
    """Facts about the profiled host (or the virtual device a simulation stands for).

    Parameters
    ----------
    cores : int
        Logical CPU cores, in ``[1, 65536]``.
    cpu_model : str
        CPU model name (``""`` when unknown).
    memory_bytes : int
        Physical memory in bytes, ``>= 0``.
    gpu_name : str | None
        Name of the GPU used for the gpu workloads, ``None`` when there is none.
    load_average : tuple[float, float, float]
        1, 5 and 15 minute load averages when the profile started (finite, ``>= 0``).
    platform : str (default: ``""``)
        Operating system and machine, e.g. ``"Linux-x86_64"``.
    """

    cores: int
    cpu_model: str
    memory_bytes: int
    gpu_name: str | None
    load_average: tuple[float, float, float]
    platform: str = ""

    def __post_init__(self) -> None:
        _check_int("host.cores", self.cores, 1, 65536)
        _check_text("host.cpu_model", self.cpu_model)
        _check_int("host.memory_bytes", self.memory_bytes, 0, 2**62)
        if self.gpu_name is not None:
            _check_text("host.gpu_name", self.gpu_name, empty=False)
        _check_text("host.platform", self.platform)
        load = self.load_average
        if isinstance(load, str | bytes) or not isinstance(load, Sequence) or len(load) != 3:
            raise InputError(f"host.load_average must be 3 numbers (1, 5, 15 min), got {load!r}")
        values = tuple(
            _check_float(f"host.load_average[{i}]", v, 0.0, 1e6) for i, v in enumerate(load)
        )
        object.__setattr__(self, "load_average", values)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready dict of the contract."""
        return {
            "cores": self.cores,
            "cpu_model": self.cpu_model,
            "memory_bytes": self.memory_bytes,
            "gpu_name": self.gpu_name,
            "load_average": list(self.load_average),
            "platform": self.platform,
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "host") -> HostFacts:
        """Parse and validate the host dict; raise :class:`InputError` naming the field."""
        keys = ("cores", "cpu_model", "memory_bytes", "gpu_name", "load_average", "platform")
        d = _mapping(where, data, keys)
        load = d["load_average"]
        if not isinstance(load, list):
            raise InputError(f"{where}.load_average must be a list of 3 numbers, got {load!r}")
        return cls(
            validate.whole(d["cores"]),  # JSON writers may emit 8.0 for 8
            d["cpu_model"],
            validate.whole(d["memory_bytes"]),
            d["gpu_name"],
            cast(tuple[float, float, float], tuple(load)),
            d["platform"],
        )


@dataclass(frozen=True)
class ProfileReport:
    """The full profile of one node: host facts and the four resource ratings.

    Parameters
    ----------
    host : HostFacts
        Facts about the host.
    resources : dict[str, ResourceReport]
        Exactly the keys of :data:`RESOURCES`; stored in that order.
    mode : {"quick", "full"}
        The profiling mode.
    elapsed_seconds : float
        Wall time of the whole profile, in ``[0, MAX_SECONDS]``.
    """

    host: HostFacts
    resources: dict[str, ResourceReport] = field(hash=False)
    mode: Mode
    elapsed_seconds: float

    def __post_init__(self) -> None:
        if not isinstance(self.host, HostFacts):
            raise InputError(f"host must be HostFacts, got {type(self.host).__name__}")
        if not isinstance(self.resources, Mapping):
            raise InputError(f"resources must be a mapping, got {type(self.resources).__name__}")
        keys = set(self.resources)
        if keys != set(RESOURCES):
            raise InputError(
                f"resources must have exactly the keys {RESOURCES}, got {sorted(map(str, keys))}"
            )
        for name in RESOURCES:
            if not isinstance(self.resources[name], ResourceReport):
                got = type(self.resources[name]).__name__
                raise InputError(f"resources[{name!r}] must be a ResourceReport, got {got}")
        validate.choice("mode", self.mode, MODES, error=InputError)
        elapsed = _check_float("elapsed_seconds", self.elapsed_seconds, 0.0, MAX_SECONDS)
        object.__setattr__(self, "resources", {r: self.resources[r] for r in RESOURCES})
        object.__setattr__(self, "elapsed_seconds", elapsed)

    @property
    def evaluations(self) -> dict[str, float]:
        """Return resource -> ``N`` (seed formula 4) in :data:`RESOURCES` order; 0 if absent."""
        return {r: self.resources[r].evaluation for r in RESOURCES}

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready dict of the contract (see the module docstring)."""
        return {
            "host": self.host.to_dict(),
            "resources": {r: self.resources[r].to_dict() for r in RESOURCES},
            "mode": self.mode,
            "elapsed_seconds": self.elapsed_seconds,
        }

    def to_json(self, indent: int | None = None) -> str:
        """Return the report as JSON text (no NaN or infinity, ever)."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    @classmethod
    def from_dict(cls, data: object) -> ProfileReport:
        """Parse and validate a report dict; raise :class:`InputError` naming the bad field."""
        d = _mapping("report", data, ("host", "resources", "mode", "elapsed_seconds"))
        host = HostFacts.from_dict(d["host"])
        raw = _mapping("resources", d["resources"], RESOURCES)
        resources = {r: ResourceReport.from_dict(raw[r], f"resources.{r}") for r in RESOURCES}
        mode = validate.choice("mode", d["mode"], MODES, error=InputError)
        return cls(host, resources, cast(Mode, mode), d["elapsed_seconds"])

    @classmethod
    def from_json(cls, text: str | bytes) -> ProfileReport:
        """Parse and validate JSON text from :meth:`to_json` (e.g. a client's reply).

        Raises
        ------
        InputError
            When the text is not JSON, is longer than :data:`MAX_JSON_CHARS`, holds NaN or
            infinity, or any key, type, range or consistency check fails; the message names
            the field.
        """
        if not isinstance(text, str | bytes):
            raise InputError(f"profile report must be JSON text, got {type(text).__name__}")
        if len(text) > MAX_JSON_CHARS:
            raise InputError(
                f"profile report must be at most {MAX_JSON_CHARS} characters, got {len(text)}"
            )

        def _reject(token: str) -> float:
            raise InputError(f"profile report must not contain {token} (not valid JSON)")

        try:
            data = json.loads(text, parse_constant=_reject)
        except (ValueError, RecursionError) as exc:
            if isinstance(exc, InputError):
                raise
            raise InputError(f"profile report is not valid JSON: {exc}") from None
        return cls.from_dict(data)


@runtime_checkable
class ResourceProbe(Protocol):
    """Anything that answers the resource benchmark of seed 000 step 2 for one node.

    :class:`~flower_edge.profiling.probe.HostProbe` runs real workloads on this host;
    simulations implement it for a virtual device.
    """

    def profile(self, mode: Mode) -> ProfileReport:
        """Run (or model) the workloads in ``mode`` and return the node's report."""
        ...
