"""``benchmarks/explore_edge.py``'s ``decay_a`` and ``abandon_quantile`` variant keys."""

from __future__ import annotations

from conftest import load_benchmark

from strategies import EdgeStrategy


def test_decay_exponent_and_abandon_quantile_reach_the_strategy() -> None:
    explore = load_benchmark("explore_edge")
    s = EdgeStrategy.preset("edge", threshold=3)
    assert s.abandon.quantile == 0.5
    explore._rules(s, {"decay_a": 0.25, "abandon_quantile": 0.7})
    assert s.abandon.quantile == 0.7
    # (1 + dt)^-a with a = 0.25, not the preset's 0.5
    assert abs(s.decay(3.0) - 4.0**-0.25) < 1e-12
    explore._rules(s, {})  # no key: nothing changes
    assert s.abandon.quantile == 0.7
