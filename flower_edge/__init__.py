"""flower-edge: Flower on heterogeneous edge devices.

The pure method lives here, free of Flower types: resource profiling of a compute node, the
operator intensity of a model, the distorted-radar match ratio, sample allocation and
rebalancing (seed 000); staleness decay, weighted aggregation and leave-one-out valuation,
and the client's abandon decision (seed 001); the wire keys shared by server and clients;
and the ``flower-edge`` command line.
"""

from flower_edge.errors import FlowerEdgeError

__all__ = ["FlowerEdgeError", "__version__"]

__version__ = "0.1.0"
