"""Simulations.

Virtual devices and clock, scenarios, the Flower App run by ``flwr run .``, the experiment
runner, reports and plots.
"""

__all__: list[str] = []
