"""Sizing a workload so that it loads its device: geometric growth of the work per step.

A small training step on a large GPU is launch-bound: the host spends longer queueing the
kernels than the device spends running them, so the device idles, its utilisation reads low
and ``E = Capacity / Time`` measures the host's launch rate, not the device (issue 12: an
H200 rated under 2x a 16-core CPU). The cure is more work per step. The sizing grows the work
``w`` (the batch, samples per step) geometrically, ``start * factor**k``, measuring at each
size a short deadline-bound run: the samples it processed, its seconds and, where a reading
fell inside it, the utilisation. It stops at the first of

1. ``"failed"``: the step did not run (out of device memory);
2. ``"utilization"``: its utilisation reached ``target_utilization``;
3. ``"plateau"``: its rate (samples/s) is less than ``min_gain`` times the best rate of the
   steps before it: more work per step no longer buys throughput, the device is saturated;
4. ``"ceiling"``: the next size would exceed ``max_work``;
5. ``"step-budget"``: one step at the next size would take longer than ``step_budget``
   seconds (projected linearly from this step's seconds per step of work);
6. ``"total-budget"``: the steps so far, their untimed overheads included, took
   ``total_budget`` seconds or more.

The chosen size is the measured one of the highest rate (the smaller one on a tie). The
timed capacity then scales with it (:func:`timed_capacity`): a whole number of steps of the
chosen work, as many as fit in the run budget at the measured rate, so that
``E = Capacity / Time`` is a rate in samples per second whatever the size, comparable with
the CPU's (one sample costs the same FLOPs at any batch size).

Everything here is a pure function of the measured steps (:func:`decide`, :func:`choose`,
:func:`timed_capacity`) or a loop over a ``measure`` callable (:func:`size_workload`), so it
is tested with fakes, without a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, get_args

from flower_edge import validate

__all__ = [
    "STOP_REASONS",
    "SizingOutcome",
    "SizingPolicy",
    "SizingStep",
    "StopReason",
    "choose",
    "decide",
    "ladder",
    "size_workload",
    "timed_capacity",
]

StopReason = Literal["failed", "utilization", "plateau", "ceiling", "step-budget", "total-budget"]
#: the reasons the growth stops, in the order they are checked
STOP_REASONS: Final[tuple[str, ...]] = get_args(StopReason)


@dataclass(frozen=True)
class SizingPolicy:
    """How far and how fast the work per step grows.

    Parameters
    ----------
    start : int
        First work size (samples per step), ``>= 1``.
    max_work : int
        Largest work size tried, ``>= start`` (a memory ceiling).
    step_budget : float
        Longest a single step of work may take, in seconds, ``> 0``; a size whose step is
        projected past it is not tried.
    total_budget : float
        Seconds all the sizing steps may take together, overheads included, ``> 0``.
    factor : int (default: 4)
        Growth factor between sizes, in ``[2, 64]``.
    target_utilization : float (default: 0.9)
        Utilisation at which the growth stops, in ``(0, 1]``.
    min_gain : float (default: 1.1)
        Least rate gain over the best earlier size to keep growing, in ``[1, factor]``.
    """

    start: int
    max_work: int
    step_budget: float
    total_budget: float
    factor: int = 4
    target_utilization: float = 0.9
    min_gain: float = 1.1

    def __post_init__(self) -> None:
        validate.integer("start", self.start, low=1)
        validate.integer("max_work", self.max_work, low=self.start)
        validate.integer("factor", self.factor, low=2, high=64)
        for name in ("step_budget", "total_budget"):
            validate.number(f"{name} (seconds)", getattr(self, name), low=0.0, low_inclusive=False)
        validate.number(
            "target_utilization", self.target_utilization, low=0.0, high=1.0, low_inclusive=False
        )
        validate.number("min_gain", self.min_gain, low=1.0, high=float(self.factor))


@dataclass(frozen=True)
class SizingStep:
    """One measured size.

    Parameters
    ----------
    work : int
        Samples per step of work (the batch).
    samples : int
        Samples processed in the measured run; 0 when the size failed (out of memory).
    seconds : float
        Seconds of the measured run (0 when failed).
    utilization : float | None (default: None)
        Utilisation of the resource during the run, ``None`` when no reading fell inside it.
    overhead : float (default: 0.0)
        Untimed seconds spent on this size before the run (resizing, warm-up).
    """

    work: int
    samples: int
    seconds: float
    utilization: float | None = None
    overhead: float = 0.0

    @property
    def failed(self) -> bool:
        """Whether the size did not run."""
        return self.samples <= 0 or self.seconds <= 0

    @property
    def rate(self) -> float:
        """Samples per second (0 when failed)."""
        return 0.0 if self.failed else self.samples / self.seconds

    @property
    def step_seconds(self) -> float:
        """Seconds per step of ``work`` samples (infinite when failed)."""
        return math.inf if self.failed else self.work / self.rate


def ladder(policy: SizingPolicy) -> list[int]:
    """Return every size the policy may try: ``start * factor**k`` up to ``max_work``."""
    sizes = [policy.start]
    while sizes[-1] * policy.factor <= policy.max_work:
        sizes.append(sizes[-1] * policy.factor)
    return sizes


def decide(policy: SizingPolicy, steps: Sequence[SizingStep]) -> StopReason | None:
    """Return why the growth stops after ``steps``, or ``None`` to try the next size.

    Parameters
    ----------
    policy : SizingPolicy
        The limits.
    steps : Sequence[SizingStep]
        The sizes measured so far, in order, at least one.
    """
    if not steps:
        raise ValueError("steps must hold at least one measured size")
    last = steps[-1]
    if last.failed:
        return "failed"
    if last.utilization is not None and last.utilization >= policy.target_utilization:
        return "utilization"
    earlier = [s.rate for s in steps[:-1] if not s.failed]
    if earlier and last.rate < policy.min_gain * max(earlier):
        return "plateau"
    if last.work * policy.factor > policy.max_work:
        return "ceiling"
    if last.step_seconds * policy.factor > policy.step_budget:
        return "step-budget"
    if math.fsum(s.seconds + s.overhead for s in steps) >= policy.total_budget:
        return "total-budget"
    return None


def choose(steps: Sequence[SizingStep]) -> SizingStep:
    """Return the measured step of the highest rate; the smaller work on a tie.

    Raises
    ------
    ValueError
        When every step failed.
    """
    ran = [s for s in steps if not s.failed]
    if not ran:
        raise ValueError("no size ran: the smallest work failed")
    best = ran[0]
    for step in ran[1:]:
        if step.rate > best.rate or (step.rate == best.rate and step.work < best.work):
            best = step
    return best


@dataclass(frozen=True)
class SizingOutcome:
    """The sizes measured, the one chosen and why the growth stopped.

    Parameters
    ----------
    steps : tuple[SizingStep, ...]
        Every measured size, in order.
    chosen : SizingStep
        The step of the highest rate (:func:`choose`).
    reason : StopReason
        Why the growth stopped (:func:`decide`).
    """

    steps: tuple[SizingStep, ...]
    chosen: SizingStep
    reason: StopReason

    def to_dict(self) -> dict[str, object]:
        """Return a JSON-ready form (for benchmarks and logs)."""
        return {
            "chosen_work": self.chosen.work,
            "reason": self.reason,
            "steps": [
                {
                    "work": s.work,
                    "samples": s.samples,
                    "seconds": s.seconds,
                    "rate": s.rate,
                    "utilization": s.utilization,
                    "overhead": s.overhead,
                }
                for s in self.steps
            ],
        }


def size_workload(policy: SizingPolicy, measure: Callable[[int], SizingStep]) -> SizingOutcome:
    """Grow the work geometrically until :func:`decide` stops it; return the outcome.

    Parameters
    ----------
    policy : SizingPolicy
        The limits.
    measure : Callable[[int], SizingStep]
        Runs the workload at a work size and returns the measured step (a failed one when the
        size does not fit).

    Raises
    ------
    ValueError
        When the smallest size failed.
    """
    steps: list[SizingStep] = []
    work = policy.start
    while True:
        step = measure(work)
        if step.work != work:
            raise ValueError(f"measure({work}) returned a step of work {step.work}")
        steps.append(step)
        reason = decide(policy, steps)
        if reason is not None:
            return SizingOutcome(tuple(steps), choose(steps), reason)
        work *= policy.factor


def timed_capacity(step: SizingStep, run_budget: float) -> int:
    """Return the capacity of a timed run: whole steps of ``step.work`` filling ``run_budget``.

    At least one step; ``floor(run_budget / step.step_seconds)`` steps otherwise, so that the
    capacity in samples scales with the work.

    Parameters
    ----------
    step : SizingStep
        The chosen size (not failed).
    run_budget : float
        Seconds one timed run should take, ``> 0``.
    """
    if step.failed:
        raise ValueError(f"the step of work {step.work} failed; it has no rate")
    validate.number("run_budget (seconds)", run_budget, low=0.0, low_inclusive=False)
    steps = max(1, math.floor(run_budget / step.step_seconds))
    return step.work * steps
