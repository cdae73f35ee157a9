"""Server side on Flower.

The semi-asynchronous EdgeStrategy, the FedBuff and FedAsync baselines on the same loop,
clocks and checkpoints.
"""

__all__: list[str] = []
