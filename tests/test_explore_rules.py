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


def test_plain_search_patches_the_step_and_restores_the_librarys() -> None:
    """``plain_search`` (issue 10, twenty-fifth session): the search may also take the plain
    mean-delta step; each aggregation's factor is counted (1000 + eta for the plain step), and
    a variant without it (or a second load of the script) gets the library's rule back."""
    from conftest import Recorder, edge_preset_on_toy, model

    import strategies.evaluation as evaluation
    from strategies import ValuationConfig

    library = evaluation.Step.__dict__["of"]
    explore = load_benchmark("explore_edge")
    try:
        explore.install({"plain_search": [1.0]})
        assert evaluation.Step.__dict__["of"] is not library
        assert load_benchmark("explore_edge")._ORIGINAL_STEP_OF is library  # not the patch
        explore.STEP_SCALES.clear()
        valuation = ValuationConfig(drop_worst=True, step_search=(1.0,))
        strategy, grid = edge_preset_on_toy(valuation)
        result = strategy.start(grid, model(0.0), num_rounds=6, evaluate_fn=Recorder(3.5))
        scales = list(explore.STEP_SCALES)
        # the toy's goal is far from the sign step's 0.03: the plain step wins first, then
        # (past the goal) the sign step stands
        assert len(scales) == 6
        assert set(scales) == {1.0, 1001.0}
        assert scales[0] == 1001.0
        metrics = [float(str(result.train_metrics_clientapp[r]["step-scale"])) for r in range(1, 7)]
        assert metrics == scales  # the round's metric says which step became the global model
    finally:
        explore.install({})
    assert evaluation.Step.__dict__["of"] is library


def test_the_step_search_ablation_takes_one_step_and_keeps_drop_worst() -> None:
    """``time_to_accuracy.py``'s ``edge-no-step-search`` (issue 10, twenty-fifth session)."""
    from simulations.app import SimSettings
    from strategies.clock import VirtualClock

    tta = load_benchmark("time_to_accuracy")
    build = tta._post_build(tta.ABLATIONS["edge-no-step-search"]["post"])
    settings = SimSettings.create("digits-20", "edge")
    ablated = build(settings, VirtualClock())
    assert ablated.valuation.step_search == ()
    assert ablated.valuation.drop_worst  # only the search is off
    assert ablated.valuation.metric_key == "val-loss"
