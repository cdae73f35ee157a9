"""Drop-in: a ``train_config`` key that the train messages set is refused, not overwritten.

Found by a new-user probe: ``strategy.start(..., train_config=ConfigRecord({"theta": 0.25}))``
(a hyperparameter of the user's ClientApp) ran, and every train message reached the ClientApp
with ``theta`` = the abandon rule's threshold (0.75) instead: the strategy writes its protocol
keys (``flower_edge.wire.TRAIN_CONFIG_KEYS``) over the user's without a word. Flower's FedAvg
overwrites only ``server-round``, and so does the strategy.
"""

from __future__ import annotations

import pytest
from conftest import make_dropin_app, model
from flwr.app import ConfigRecord

from flower_edge import wire
from flower_edge.errors import ConfigError
from strategies import EdgeStrategy, FedBuff, InProcessGrid


@pytest.mark.parametrize("key", [wire.THETA, wire.VALUES, wire.RESOURCE])
def test_a_protocol_key_in_train_config_is_refused_before_any_message(key: str) -> None:
    grid = InProcessGrid(make_dropin_app(), 4)
    config = ConfigRecord({"lr": 0.1, key: 0.25})
    with pytest.raises(ConfigError, match=f"train_config holds '{key}'") as err:
        EdgeStrategy(threshold=2).start(grid, model(0.0), num_rounds=1, train_config=config)
    assert "rename it" in str(err.value)
    assert grid.pushed == []


def test_every_protocol_key_is_named_and_the_baselines_check_too() -> None:
    config = ConfigRecord({k: 1.0 for k in sorted(wire.TRAIN_CONFIG_KEYS)})
    with pytest.raises(ConfigError) as err:
        FedBuff(threshold=2).start(InProcessGrid(make_dropin_app(), 4), model(0.0), 1, 60, config)
    for key in wire.TRAIN_CONFIG_KEYS:
        assert repr(key) in str(err.value)


def test_the_apps_own_keys_reach_the_clientapp_unchanged() -> None:
    grid = InProcessGrid(make_dropin_app(), 4)
    config = ConfigRecord({"lr": 0.1, "proximal-mu": 0.5, wire.SERVER_ROUND: 99})
    EdgeStrategy(threshold=2).start(grid, model(0.0), num_rounds=1, train_config=config)
    sent = [m.content["config"] for m in grid.pushed if m.metadata.message_type == "train"]
    assert sent
    for cfg in sent:
        assert isinstance(cfg, ConfigRecord)
        assert cfg["lr"] == 0.1
        assert cfg["proximal-mu"] == 0.5
        assert cfg[wire.SERVER_ROUND] != 99  # set as FedAvg sets it: the round of the update
