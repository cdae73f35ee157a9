"""Device resource profiling (seed 000 step 2, formulas 3 and 4).

A node runs single-resource-intensive workloads for each resource in :data:`RESOURCES`
(cpu, gpu, memory, disk), records per workload the samples processed, the median completion
time and the utilisation of that resource, and rates each resource by
``N = mean_w(U_w * E_w)`` with ``E_w = Capacity_w / Time_w``.

:class:`HostProbe` (or :func:`profile_host`) does this on the real host;
:class:`ResourceProbe` is the interface a simulated device implements to answer the same
benchmark. Reports are frozen, validated records with a JSON form
(:meth:`ProfileReport.to_json` / :meth:`ProfileReport.from_json`) sent over the wire under
:data:`flower_edge.wire.PROFILE_REPORT`.

Importing this package does not import torch; the workloads do, when they run.
"""

from flower_edge.profiling.probe import PLANS, HostProbe, ProfilePlan, profile_host
from flower_edge.profiling.report import (
    MODES,
    RESOURCES,
    HostFacts,
    Mode,
    ProfileReport,
    ResourceProbe,
    ResourceReport,
    WorkloadResult,
    execution_intensity,
    resource_evaluation,
)

__all__ = [
    "MODES",
    "PLANS",
    "RESOURCES",
    "HostFacts",
    "HostProbe",
    "Mode",
    "ProfilePlan",
    "ProfileReport",
    "ResourceProbe",
    "ResourceReport",
    "WorkloadResult",
    "execution_intensity",
    "profile_host",
    "resource_evaluation",
]
