"""ServerApp of the deployment app: EdgeStrategy on the server's wall clock.

Run-config keys: see ``[tool.flwr.app.config]`` in this app's ``pyproject.toml``. The server
evaluates each new global model on the held-out digits test set (leave-one-out values and the
reported accuracy) and, with ``checkpoint-dir``, writes a checkpoint and an audit line per
aggregated update after each aggregation; ``resume = true`` continues from it.

The strategy is the ``preset`` run-config key's (``"edge"``, the project's best configuration,
by default; ``"edge-seed"``, the seeds exactly: :meth:`strategies.EdgeStrategy.preset`).
Every seed mechanism is on: ``p_c`` of the radar chart comes from the operator analysis of the
served MLP (0.40), slices give busy nodes preemption points, the abandon rule's theta is
derived from the live scores unless ``theta`` >= 0 is in the run config, and the run stops on a
plateau (``patience``) or at ``target-accuracy`` (both on the test accuracy). With ``"edge"`` the
reported accuracy and the final model are those of the served model, the moving average of the
global models over one pass of the federation (``average_passes``), or the global model when
its validation loss is lower (``serve_better``); the nodes train from the global model
itself; and the server values participants and drops an aggregation's worst update
(``drop_worst``) on its own validation set, :data:`VALIDATION_SAMPLES` training-pool
samples (``val-loss``), never on the test set it reports; on the same set it scales each
step by the factor of ``step-search`` that scores best (``ValuationConfig.step_search``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from logging import INFO

import torch
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp
from torch import nn

from clients.data import load_centralized_test, load_server_validation
from clients.task import evaluate_model
from flower_edge import validate
from flower_edge.errors import ConfigError
from flower_edge.models import MLP
from flower_edge.server_opt import PRESET_STEP_SEARCH
from strategies import EdgeStrategy, LoopConfig, ShareConfig, ValuationConfig
from strategies.config import (
    DEFAULT_PATIENCE_PASSES,
    DEFAULT_WINDOW_PASSES,
    AbandonConfig,
    StopConfig,
)
from strategies.edge import PRESETS

app = ServerApp()

#: shape of one training batch of the served model (``input_shape`` of its operator analysis)
BATCH_SHAPE = (32, 64)

#: the server's validation set of the ``edge`` preset (values and drop_worst read its loss)
VALIDATION_SAMPLES = 300

#: printed once with the run's figures as JSON (tests and scripts grep for it)
RESULT_TAG = "FLOWER-EDGE-RESULT"


def _number(context: Context, key: str) -> float:
    """Return run-config ``key`` as a number (not NaN: ``deadline = nan`` meant no deadline)."""
    return validate.number(f"run config {key!r}", context.run_config[key], finite=False)


def _integer(context: Context, key: str) -> int:
    """Return run-config ``key`` as an integer >= 0 (a TOML ``3.0`` is 3; ``2.5`` an error).

    Found by a new-user probe: ``threshold = 2.5`` ran K = 2 and ``patience = -3`` turned the
    stop off, without a word.
    """
    value = context.run_config[key]
    return validate.integer(f"run config {key!r}", value, low=0, integral_float=True)


def _flag(context: Context, key: str) -> bool:
    """Return run-config ``key`` as a boolean (``"false"``, a string, was true)."""
    return validate.boolean(f"run config {key!r}", context.run_config[key])


def _text(context: Context, key: str, default: str | None = None) -> str:
    value = context.run_config.get(key, default)
    return validate.text(f"run config {key!r}", value, allow_empty=True)


def _step_search(context: Context, preset: str) -> tuple[float, ...]:
    """Return the server's step factors from run-config ``step-search``.

    ``"preset"``: the ``edge`` preset's (:data:`PRESET_STEP_SEARCH`), none for ``edge-seed``;
    ``""`` or ``"off"``: none; else factors separated by spaces or commas (``"1 2 4"``), each
    in ``(0, 100]``. The search chooses on the server's validation set, which only the
    ``edge`` preset has: factors with ``edge-seed`` are an error.
    """
    key = "run config 'step-search'"
    value = _text(context, "step-search", "preset").strip()
    if value == "preset":
        return PRESET_STEP_SEARCH if preset == "edge" else ()
    if value in ("", "off"):
        return ()
    if preset != "edge":
        raise ConfigError(
            f"{key} needs preset 'edge' (it chooses on the server's validation set; "
            f"edge-seed values on the test set), got preset {preset!r}"
        )
    words = value.replace(",", " ").split()
    try:
        factors = [float(word) for word in words]
    except ValueError:
        raise ConfigError(
            f"{key} must be 'preset', 'off' or numbers such as '1 1.5 2 3', got {value!r}"
        ) from None
    checked = validate.numbers(key, factors, low=0.0, low_inclusive=False, high=100.0)
    return tuple(float(c) for c in checked)


def build_strategy(context: Context) -> EdgeStrategy:
    """Return the EdgeStrategy described by the run config."""
    cfg = context.run_config
    deadline = _number(context, "deadline")  # < 0: the library's "auto"; 0: none
    min_nodes = _integer(context, "min-nodes")
    checkpoint = _text(context, "checkpoint-dir")
    if _flag(context, "resume") and not checkpoint:
        raise ConfigError(
            "run config 'resume' = true needs 'checkpoint-dir': the folder of the run to"
            " continue (the same --run-config 'checkpoint-dir=\"...\"' as that run)"
        )
    budget = _number(context, "slice-budget")  # < 0: the library's default (slices on)
    patience = _integer(context, "patience")
    target = _number(context, "target-accuracy")
    fixed = _number(context, "theta") if "theta" in cfg else -1.0
    theta = fixed if fixed >= 0 else None  # < 0: derived from the live scores
    preset = _text(context, "preset", "edge")
    if preset not in PRESETS:
        raise ConfigError(
            f"run config 'preset' must be one of {', '.join(PRESETS)}, got {preset!r}"
        )
    # the seed values on the test metric; edge on a validation set of its own
    search = _step_search(context, preset)
    valuation = (
        ValuationConfig(
            metric_key="val-loss", higher_is_better=False, drop_worst=True, step_search=search
        )
        if preset == "edge"
        else None  # the library's default
    )
    loop = LoopConfig(
        deadline="auto" if deadline < 0 else deadline if deadline > 0 else None,
        min_nodes=min_nodes if min_nodes > 0 else None,
        registration_timeout=_number(context, "registration-timeout"),
        poll_interval=0.2,
    )
    if budget >= 0:
        loop = replace(loop, slice_budget=budget)
    return EdgeStrategy.preset(
        "edge" if preset == "edge" else "edge-seed",
        valuation=valuation,
        threshold=_integer(context, "threshold"),
        decay=_text(context, "decay"),
        decay_a=_number(context, "decay-a"),
        loop=loop,
        shares=ShareConfig(
            profile=_flag(context, "profile"),
            max_share_fraction=_number(context, "max-share-fraction"),
            # 0 = no floor; a floor keeps a slow device's data in the run (label-skewed data;
            # docs/benchmarks/deployment.md, runs 25-27)
            min_epochs=_number(context, "min-epochs") or None,
            compute_share="auto",  # the operator analysis of the served model, once
            model=MLP,
            input_shape=BATCH_SHAPE,
        ),
        stop=StopConfig(  # the library's plateau rule (windowed over a pass), or the target
            metric_key="accuracy",
            patience=patience if patience > 0 else None,
            target=target if target > 0 else None,
            window_passes=DEFAULT_WINDOW_PASSES if patience > 0 else None,
            patience_passes=DEFAULT_PATIENCE_PASSES if patience > 0 else None,
        ),
        abandon=AbandonConfig(alpha=_number(context, "alpha"), theta=theta),
        checkpoint_dir=checkpoint or None,
        resume=_flag(context, "resume"),
    )


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run EdgeStrategy for ``num-server-rounds`` aggregations and log the figures."""
    torch.manual_seed(_integer(context, "seed"))
    # edge evaluates several models per aggregation (its leave-one-out values, the served
    # average); on the digits MLP each takes milliseconds. One torch thread keeps them from
    # waiting on descheduled threads where SuperNodes share the server's cores
    # (benchmarks/eval_threads.py; docs/benchmarks/deployment.md, runs 16-20).
    torch.set_num_threads(1)
    strategy = build_strategy(context)
    model = MLP(in_features=64)
    test = load_centralized_test("digits")
    seed = _integer(context, "seed")
    validation = load_server_validation("digits", size=VALIDATION_SAMPLES, seed=seed)
    loss_fn = nn.CrossEntropyLoss()

    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        res = evaluate_model(model, loss_fn, test)
        val = evaluate_model(model, loss_fn, validation)
        return MetricRecord(
            {
                "accuracy": res.accuracy,
                "loss": res.loss,
                "val-accuracy": val.accuracy,
                "val-loss": val.loss,
            }
        )

    result = strategy.start(
        grid,
        ArrayRecord(model.state_dict()),
        num_rounds=_integer(context, "num-server-rounds"),
        timeout=_number(context, "timeout"),
        evaluate_fn=evaluate,
    )
    final = max(result.evaluate_metrics_serverapp, default=0)
    summary = {
        "rounds": [h.round for h in strategy.history],
        "participants": [list(h.participants) for h in strategy.history],
        "accuracy": {str(r): m["accuracy"] for r, m in result.evaluate_metrics_serverapp.items()},
        "final-round": final,
        "nodes": sorted({n for h in strategy.history for n in h.participants}),
        "rejected": sum(1 for e in strategy.events if e.kind == "rejected"),
        "late": sum(1 for e in strategy.events if e.kind == "late"),
    }
    log(INFO, "%s %s", RESULT_TAG, json.dumps(summary, sort_keys=True))
