"""The defaults and names that the docs' tables quote are the code's.

Found by a new-user audit of the docs against the code: the list of ``JobEvent`` kinds in
docs/strategy.md lacked ``profiled``, and docs/simulations.md's example of the ``edge`` row's
description lacked one of its departures. The tables and the constructor signature checked
here agreed with the code when this was written (each default compared by hand); now a
changed default fails here until the docs say it.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import tomllib
from pathlib import Path
from typing import Any, get_args

from clients import Task
from clients.settings import DEFAULT_ALPHA, DEFAULT_SEED, DEFAULT_THETA, RUN_CONFIG_KEYS
from strategies import EdgeStrategy, SemiAsyncStrategy, config
from strategies.base import StrategyOptions
from strategies.fedavg_options import FEDAVG_IGNORED, FedAvgOptions
from strategies.records import EventKind

ROOT = Path(__file__).resolve().parents[1]


def _doc(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _rows(text: str, header: str) -> list[list[str]]:
    """Return the cells of the rows of the Markdown table whose header row starts ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _as_doc(value: Any) -> str:
    """Write a default the way the tables write it: strings quoted, the rest as Python."""
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _documented(cell: str) -> str:
    """Return a default cell without its note (``None (EdgeStrategy: 20)``: ``None``)."""
    return cell.split(" (")[0].strip("`")


def test_strategy_options_table_has_the_config_defaults() -> None:
    rows = _rows(_doc("docs/strategy.md"), "| group | option | default |")
    groups = {
        name: {f.name: f.default for f in dataclasses.fields(getattr(config, name))}
        for name in ("LoopConfig", "ShareConfig", "ValuationConfig", "StopConfig", "AbandonConfig")
    }
    groups[""] = {f.name: f.default for f in dataclasses.fields(FedAvgOptions)}
    group, checked = "", 0
    for cells in rows:
        group = cells[0].strip("`") or group
        names = re.findall(r"`([a-z_]+)`", cells[1])
        defaults = [d.strip() for d in re.split(r",\s*(?![^()]*\))", cells[2])]
        for name, default in zip(names, defaults, strict=False):
            fields = groups.get(group, {})
            if name not in fields or (group, name) == ("LoopConfig", "min_nodes"):
                continue  # EdgeStrategy's own arguments; min_nodes: an effective default
            assert _documented(default) == _as_doc(fields[name]), f"{group or 'FedAvg'}.{name}"
            checked += 1
    assert checked >= 40


def test_strategy_docs_list_every_event_kind() -> None:
    text = " ".join(_doc("docs/strategy.md").split())
    listed = re.search(r"`strategy\.events`: `JobEvent`s \(([a-z, ]+)\)", text)
    assert listed is not None
    assert listed.group(1).split(", ") == list(get_args(EventKind))


def test_client_docs_tables_have_the_task_and_run_config_defaults() -> None:
    text = _doc("docs/client.md")
    task = {f.name: f.default for f in dataclasses.fields(Task)}
    for field, default, _ in _rows(text, "| field | default | meaning |"):
        name = field.strip("`")
        if default == "(required)":
            assert task[name] is dataclasses.MISSING, name
        elif name == "loss_fn":
            assert default == f"`nn.{task[name].__name__}`"
        else:
            assert _documented(default) == _as_doc(task[name]), name
    keys = _rows(text, "| key | type, range | default | used for |")
    assert tuple(k.strip("`") for k, *_ in keys) == RUN_CONFIG_KEYS
    own = {"alpha": DEFAULT_ALPHA, "theta": DEFAULT_THETA, "seed": DEFAULT_SEED}
    for key, _, default, _ in keys:
        if key.strip("`") in own:
            assert float(default) == own[key.strip("`")], key


def test_flower_app_table_has_the_run_config_defaults() -> None:
    schema = tomllib.loads(_doc("pyproject.toml"))["tool"]["flwr"]["app"]["config"]
    documented: dict[str, Any] = {}
    for key, _, default in _rows(_doc("docs/simulations.md"), "| key | meaning | default |"):
        names = re.findall(r"`([a-z-]+)`", key)
        values = [v.strip().strip("`") for v in default.split(",")]
        documented.update(zip(names, values, strict=True))
    assert set(documented) == set(schema)
    for key, value in schema.items():
        assert str(value).removesuffix(".0") == documented[key].removesuffix(".0"), key


def test_simulations_docs_example_description_is_the_edge_rows() -> None:
    from simulations.presets import departures
    from simulations.settings import SimSettings

    text = " ".join(_doc("docs/simulations.md").split())
    example = re.search(r"departure from the seeds \(e\.g\. `([^`]+)`\)", text)
    assert example is not None

    def head(part: str) -> str:  # the departure named, without its details or "..."
        return re.split(r"[:(]|\.\.\.", part)[0].strip()

    documented = [head(part) for part in example.group(1).split("; ")]
    actual = [head(part) for part in departures(SimSettings.create("digits-20", "edge"))]
    assert documented == actual


def test_strategy_docs_signature_has_the_constructor_defaults() -> None:
    text = " ".join(_doc("docs/strategy.md").split())
    signature = re.search(r"`EdgeStrategy\(threshold, \*, ([^`]+)\)`", text)
    assert signature is not None
    documented = dict(item.split("=", 1) for item in signature.group(1).split(", "))
    code = {f.name: f.default for f in dataclasses.fields(FedAvgOptions)}
    for cls in (SemiAsyncStrategy, EdgeStrategy):
        for name, param in inspect.signature(cls.__init__).parameters.items():
            if param.default is not inspect.Parameter.empty:
                code[name] = param.default
    assert {name: _as_doc(value) for name, value in code.items()} == documented
    # FedAvg's fraction_train and min_train_nodes are taken and ignored (docs/dropin.md)
    assert set(StrategyOptions.__annotations__) - set(documented) == set(FEDAVG_IGNORED)


def test_flwr_run_drops_a_ray_address_in_the_connection_as_the_docs_say() -> None:
    """docs/simulations.md told ``flwr run`` users to attach to a Ray cluster with
    ``options.backend.init-args.address``, which flwr 1.42 drops: the run used a local Ray."""
    from flwr.cli.flower_config import _parse_simulation_options

    options = {"num-supernodes": 2, "backend": {"init-args": {"address": "auto", "num-cpus": 2}}}
    init_args = _parse_simulation_options(options).backend.init_args
    assert init_args is not None
    assert init_args.num_cpus == 2
    assert "address" not in vars(init_args)  # no such field: the key is dropped
    text = " ".join(_doc("docs/simulations.md").split())
    assert "init-args.address =" not in text
    assert "`RAY_ADDRESS=HEAD_IP:6379`" in text


def test_deployment_docs_quote_flowers_pull_limits() -> None:
    """docs/deployment.md said a reply's arrays are pulled "with no time limit"; flwr 1.42
    gives up after its PULL_MAX_TIME (the docs' bound on how long a run can stall)."""
    from flwr.supercore.constant import PULL_BACKOFF_CAP, PULL_MAX_TIME

    text = " ".join(_doc("docs/deployment.md").split())
    assert f"`PULL_MAX_TIME`, {PULL_MAX_TIME} s; backoff capped at {PULL_BACKOFF_CAP} s" in text


def test_simulations_docs_scenario_table_is_the_scenarios() -> None:
    from simulations.scenarios import SCENARIOS

    rows = _rows(_doc("docs/simulations.md"), "| name | data | model | clients | partition |")
    assert [row[0].split("`")[1] for row in rows] == list(SCENARIOS)
    for name, _, _, clients, _, spread, k, target, budget in rows:
        scenario = SCENARIOS[name.split("`")[1]]
        assert int(clients) == scenario.num_clients, name
        assert float(spread.rstrip("×")) == scenario.heterogeneity, name
        assert int(k.split()[0]) == scenario.threshold, name
        edge_k = k.split(": ")[1].rstrip(")") if "(edge: " in k else k
        assert int(edge_k) == scenario.edge_k, name
        assert float(target) == scenario.target_accuracy, name
        assert int(budget) == scenario.update_budget, name
